#include "model/quantization.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tandem {
namespace {

using nlohmann::json;

std::string GetString(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// [rows, cols] of positive integers into *r, *c.
Status GetBlock(const json& j, const char* key, const std::string& file, int64_t* r, int64_t* c) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number_integer() ||
      !(*it)[1].is_number_integer() || (*it)[0].get<int64_t>() <= 0 || (*it)[1].get<int64_t>() <= 0) {
    return Err(StatusCode::kInvalidArgument, "{}: quantization_config.{} must be [rows, cols] of positive "
               "integers, got {}", file, key, it->dump());
  }
  *r = (*it)[0].get<int64_t>();
  *c = (*it)[1].get<int64_t>();
  return Status::Ok();
}

Status ParseFp8(const json& q, const std::string& file, QuantizationConfig* out) {
  const std::string fmt_name = GetString(q, "fmt");
  if (!fmt_name.empty() && fmt_name != "e4m3") {
    return Err(StatusCode::kUnimplemented, "{}: fp8 fmt '{}' is not implemented (e4m3 is)", file, fmt_name);
  }
  out->source = "fp8";
  if (q.contains("weight_block_size") && !q["weight_block_size"].is_null()) {
    TANDEM_RETURN_IF_ERROR(GetBlock(q, "weight_block_size", file, &out->block_rows, &out->block_cols));
    out->scale_suffix = "weight_scale_inv";
  }
  return Status::Ok();
}

Status ParseCompressedTensors(const json& q, const std::string& file, QuantizationConfig* out) {
  const std::string format = GetString(q, "format");
  if (format != "float-quantized" && format != "naive-quantized") {
    return Err(StatusCode::kUnimplemented, "{}: compressed-tensors format '{}' is not implemented "
               "(float-quantized FP8 is)", file, format);
  }
  auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty()) {
    return Err(StatusCode::kInvalidArgument, "{}: compressed-tensors quantization_config has no config_groups", file);
  }
  std::string strategy;
  for (const auto& [name, g] : groups->items()) {
    const json w = g.is_object() ? g.value("weights", json()) : json();
    if (!w.is_object()) {
      return Err(StatusCode::kInvalidArgument, "{}: config_groups.{} has no weights scheme", file, name);
    }
    const std::string type = GetString(w, "type");
    const int bits = w.value("num_bits", 0);
    if (type != "float" || bits != 8) {
      return Err(StatusCode::kUnimplemented, "{}: config_groups.{} quantizes weights to {} bits of type '{}'; "
                 "only 8-bit float (FP8) is implemented", file, name, bits, type);
    }
    const std::string s = GetString(w, "strategy");
    if (s != "tensor" && s != "channel" && s != "block") {
      return Err(StatusCode::kUnimplemented, "{}: config_groups.{} weight strategy '{}' is not implemented "
                 "(tensor, channel, block)", file, name, s);
    }
    if (!strategy.empty() && s != strategy) {
      return Err(StatusCode::kUnimplemented, "{}: config_groups with different weight strategies ({}, {})",
                 file, strategy, s);
    }
    strategy = s;
    if (s == "block") {
      TANDEM_RETURN_IF_ERROR(GetBlock(w, "block_structure", file, &out->block_rows, &out->block_cols));
      if (out->block_rows == 0) {
        return Err(StatusCode::kInvalidArgument, "{}: config_groups.{}: strategy block needs block_structure", file, name);
      }
    } else if (s == "channel") {
      out->block_rows = 1;
      out->block_cols = 0;
    }
  }
  out->source = "compressed-tensors";
  return Status::Ok();
}

}  // namespace

std::string QuantizationConfig::Describe() const {
  if (!enabled()) return "none";
  const std::string per = block_rows == 0 && block_cols == 0   ? "tensor"
                          : block_rows == 1 && block_cols == 0 ? "output channel"
                                                               : fmt::format("{}x{} block", block_rows, block_cols);
  return fmt::format("fp8 e4m3 ({}; scales per {})", source, per);
}

Result<QuantizationConfig> ParseQuantizationConfig(const json& q, const std::string& file) {
  QuantizationConfig out;
  if (q.is_null()) return out;
  if (!q.is_object()) {
    return Err(StatusCode::kInvalidArgument, "{}: quantization_config must be an object, got {}", file, q.dump());
  }
  const std::string method = GetString(q, "quant_method");
  out.method = QuantizationConfig::Method::kFp8;
  if (method == "fp8") {
    TANDEM_RETURN_IF_ERROR(ParseFp8(q, file, &out));
  } else if (method == "compressed-tensors") {
    TANDEM_RETURN_IF_ERROR(ParseCompressedTensors(q, file, &out));
  } else {
    return Err(StatusCode::kUnimplemented, "{}: quantization method '{}' is not implemented (fp8 and "
               "compressed-tensors FP8 are)", file, method);
  }
  return out;
}

Result<QuantizationConfig> ResolveQuantization(const QuantizationConfig& checkpoint,
                                               const std::string& requested) {
  if (requested.empty() || requested == "none") return checkpoint;
  if (requested != "fp8") {
    return Err(StatusCode::kInvalidArgument, "--quantization {}: unknown (none, fp8)", requested);
  }
  if (checkpoint.enabled()) return checkpoint;
  QuantizationConfig online;
  online.method = QuantizationConfig::Method::kFp8;
  online.source = "online";
  online.block_rows = 1;
  online.block_cols = 0;
  return online;
}

Result<KvCacheDtype> ParseKvCacheDtype(const std::string& name) {
  if (name.empty() || name == "auto") return KvCacheDtype::kAuto;
  if (name == "fp8" || name == "fp8_e4m3") return KvCacheDtype::kFp8E4M3;
  return Err(StatusCode::kInvalidArgument, "--kv-cache-dtype '{}' is not supported (auto, fp8, fp8_e4m3)", name);
}

}  // namespace tandem
