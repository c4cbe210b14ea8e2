#include "model/generation_config.h"

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"

namespace tandem {

std::string SamplingDefaults::ToString() const {
  std::string s;
  auto add = [&s](const char* key, const std::string& value) {
    if (!s.empty()) s += ' ';
    s += fmt::format("{}={}", key, value);
  };
  if (temperature) add("temperature", fmt::format("{}", *temperature));
  if (top_k) add("top_k", std::to_string(*top_k));
  if (top_p) add("top_p", fmt::format("{}", *top_p));
  if (min_p) add("min_p", fmt::format("{}", *min_p));
  if (repetition_penalty) add("repetition_penalty", fmt::format("{}", *repetition_penalty));
  if (max_tokens) add("max_new_tokens", std::to_string(*max_tokens));
  return s.empty() ? "none" : s;
}

Result<SamplingDefaults> LoadSamplingDefaults(const std::string& dir) {
  const std::string file = (std::filesystem::path(dir) / "generation_config.json").string();
  SamplingDefaults d;
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return d;
  TANDEM_ASSIGN_OR_RETURN(nlohmann::json j, ReadJsonFile(file));
  if (!j.is_object()) return Err(StatusCode::kInvalidArgument, "{}: not a JSON object", file);
  // A present number (null counts as absent, as transformers writes unset keys), checked against
  // [lo, hi] (lo excluded when lo_open).
  auto number = [&](const char* key, double lo, bool lo_open, double hi,
                    std::optional<float>* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return Status::Ok();
    if (!it->is_number()) return Err(StatusCode::kInvalidArgument, "{}: {} is not a number", file, key);
    const double v = it->get<double>();
    // As a float, as the sampler holds it: 1e-50 would pass as a double and become 0.
    const float f = static_cast<float>(v);
    if (v < lo || (lo_open && v == lo) || v > hi || (lo_open && f <= static_cast<float>(lo))) {
      return Err(StatusCode::kInvalidArgument, "{}: {} {} is outside {}{}, {}]", file, key, v,
                 lo_open ? "(" : "[", lo, hi);
    }
    *out = f;
    return Status::Ok();
  };
  TANDEM_RETURN_IF_ERROR(number("temperature", 0.0, false, 1e6, &d.temperature));
  TANDEM_RETURN_IF_ERROR(number("top_p", 0.0, true, 1.0, &d.top_p));
  TANDEM_RETURN_IF_ERROR(number("min_p", 0.0, false, 1.0, &d.min_p));
  TANDEM_RETURN_IF_ERROR(number("repetition_penalty", 0.0, true, 1e6, &d.repetition_penalty));
  // A present integer in [lo, 2^30] (an unsigned one past int64 must not wrap to a small value).
  auto integer = [&](const char* key, int lo, const char* what, std::optional<int>* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return Status::Ok();
    const bool fits = it->is_number_integer() && !(it->is_number_unsigned() && it->get<uint64_t>() > (1u << 30)) &&
                      it->get<int64_t>() >= lo && it->get<int64_t>() <= (1 << 30);
    if (!fits) return Err(StatusCode::kInvalidArgument, "{}: {} {} is not {}", file, key, it->dump(), what);
    *out = static_cast<int>(it->get<int64_t>());
    return Status::Ok();
  };
  TANDEM_RETURN_IF_ERROR(integer("top_k", -1, "-1, 0 or an integer from 1 to 2^30", &d.top_k));
  TANDEM_RETURN_IF_ERROR(integer("max_new_tokens", 1, "an integer from 1 to 2^30", &d.max_tokens));
  return d;
}

}  // namespace tandem
