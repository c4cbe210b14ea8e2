#include "planner/profile.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tandem::planner {

namespace {

// y at x on the polyline through (xs, ys) (xs ascending, at least one point), the end segments
// extended.
double Interpolate(const std::vector<double>& xs, const std::vector<double>& ys, double x) {
  if (xs.size() == 1) return ys[0];
  size_t i = 1;
  while (i + 1 < xs.size() && x > xs[i]) ++i;
  const double t = (x - xs[i - 1]) / (xs[i] - xs[i - 1]);
  return ys[i - 1] + t * (ys[i] - ys[i - 1]);
}

// The decode points of the profiled context that serves `context`.
std::vector<const DecodePoint*> ContextRow(const std::vector<DecodePoint>& d, double context) {
  int chosen = -1;
  for (const DecodePoint& p : d) {
    if (p.context >= context && (chosen < 0 || p.context < chosen)) chosen = p.context;
  }
  if (chosen < 0) {
    for (const DecodePoint& p : d) chosen = std::max(chosen, p.context);
  }
  std::vector<const DecodePoint*> row;
  for (const DecodePoint& p : d) {
    if (p.context == chosen) row.push_back(&p);
  }
  return row;  // sorted by batch: d is sorted by (context, batch)
}

}  // namespace

double Profile::PrefillMs(double prompt_tokens) const {
  if (prefill.empty()) return 0;
  std::vector<double> xs, ys;
  for (const PrefillPoint& p : prefill) {
    xs.push_back(p.prompt_tokens);
    ys.push_back(p.ttft_ms);
  }
  return std::max(Interpolate(xs, ys, prompt_tokens), ys.front() * std::min(1.0, prompt_tokens / xs.front()));
}

double Profile::ItlMs(double context, double batch) const {
  const auto row = ContextRow(decode, context);
  if (row.empty()) return 0;
  std::vector<double> xs, ys;
  for (const DecodePoint* p : row) {
    xs.push_back(p->batch);
    ys.push_back(p->itl_ms);
  }
  return std::max(0.0, Interpolate(xs, ys, batch));
}

double Profile::MaxBatch(double context, double itl_ms) const {
  const auto row = ContextRow(decode, context);
  if (row.empty() || row.front()->itl_ms > itl_ms) return 0;
  for (size_t i = 1; i < row.size(); ++i) {
    if (row[i]->itl_ms > itl_ms) {  // between the previous point and this one
      const DecodePoint& a = *row[i - 1];
      const DecodePoint& b = *row[i];
      return a.batch + (itl_ms - a.itl_ms) / (b.itl_ms - a.itl_ms) * (b.batch - a.batch);
    }
  }
  return row.back()->batch;
}

Result<Profile> ProfileFromJson(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("prefill") || !j["prefill"].is_array() || !j.contains("decode") ||
      !j["decode"].is_array()) {
    return Status(StatusCode::kInvalidArgument, "a profile needs 'prefill' and 'decode' arrays");
  }
  Profile p;
  p.model = j.value("model", "");
  p.device = j.value("device", "");
  auto positive = [](const nlohmann::json& o, const char* key, double* out) {
    if (!o.is_object() || !o.contains(key) || !o[key].is_number()) return false;
    *out = o[key].get<double>();
    return std::isfinite(*out) && *out > 0;
  };
  for (const auto& o : j["prefill"]) {
    double n = 0, ms = 0;
    if (!positive(o, "prompt_tokens", &n) || !positive(o, "ttft_ms", &ms)) {
      return Status(StatusCode::kInvalidArgument,
                    "a prefill point needs positive 'prompt_tokens' and 'ttft_ms'");
    }
    p.prefill.push_back({static_cast<int>(n), ms});
  }
  for (const auto& o : j["decode"]) {
    double c = 0, b = 0, ms = 0;
    if (!positive(o, "context", &c) || !positive(o, "batch", &b) || !positive(o, "itl_ms", &ms)) {
      return Status(StatusCode::kInvalidArgument,
                    "a decode point needs positive 'context', 'batch' and 'itl_ms'");
    }
    p.decode.push_back({static_cast<int>(c), static_cast<int>(b), ms});
  }
  if (p.prefill.empty() || p.decode.empty()) {
    return Status(StatusCode::kInvalidArgument, "a profile needs at least one prefill and one decode point");
  }
  std::sort(p.prefill.begin(), p.prefill.end(),
            [](const PrefillPoint& a, const PrefillPoint& b) { return a.prompt_tokens < b.prompt_tokens; });
  std::sort(p.decode.begin(), p.decode.end(), [](const DecodePoint& a, const DecodePoint& b) {
    return a.context != b.context ? a.context < b.context : a.batch < b.batch;
  });
  for (size_t i = 1; i < p.prefill.size(); ++i) {
    if (p.prefill[i].prompt_tokens == p.prefill[i - 1].prompt_tokens) {
      return Err(StatusCode::kInvalidArgument, "two prefill points at {} prompt tokens",
                 p.prefill[i].prompt_tokens);
    }
  }
  for (size_t i = 1; i < p.decode.size(); ++i) {
    if (p.decode[i].context == p.decode[i - 1].context && p.decode[i].batch == p.decode[i - 1].batch) {
      return Err(StatusCode::kInvalidArgument, "two decode points at context {} batch {}",
                 p.decode[i].context, p.decode[i].batch);
    }
  }
  return p;
}

nlohmann::json ToJson(const Profile& p) {
  nlohmann::json prefill = nlohmann::json::array(), decode = nlohmann::json::array();
  for (const PrefillPoint& x : p.prefill) prefill.push_back({{"prompt_tokens", x.prompt_tokens}, {"ttft_ms", x.ttft_ms}});
  for (const DecodePoint& x : p.decode) {
    decode.push_back({{"context", x.context}, {"batch", x.batch}, {"itl_ms", x.itl_ms}});
  }
  return {{"model", p.model}, {"device", p.device}, {"prefill", prefill}, {"decode", decode}};
}

}  // namespace tandem::planner
