#include "model/kv_scales.h"

#include <cmath>
#include <string>

#include <fmt/format.h>

namespace tandem {
namespace {

// The scales of `t` broadcast to num_kv_heads values into out.
Status ReadScales(const TensorView& t, int num_kv_heads, float* out) {
  const int64_t n = t.num_elements();
  if (!(t.shape.empty() || (t.shape.size() == 1 && (n == 1 || n == num_kv_heads)))) {
    return Err(StatusCode::kInvalidArgument, "{}: KV-cache scale of shape {} (want [], [1] or [{}]) in {}", t.name,
               ShapeString(t.shape), num_kv_heads, t.file);
  }
  std::vector<float> v;
  TANDEM_RETURN_IF_ERROR(TensorToFloat(t, &v));
  for (int h = 0; h < num_kv_heads; ++h) {
    const float s = v[n == 1 ? 0 : h];
    if (!std::isfinite(s) || s <= 0.0f) {
      return Err(StatusCode::kInvalidArgument, "{}: KV-cache scale {} (must be finite and > 0) in {}", t.name, s,
                 t.file);
    }
    out[h] = s;
  }
  return Status::Ok();
}

const TensorView* FindFirst(const SafetensorsModel& st, std::initializer_list<std::string> names) {
  for (const std::string& name : names) {
    if (st.Contains(name)) return *st.Find(name);
  }
  return nullptr;
}

}  // namespace

KvCacheScales UnitKvCacheScales(const ModelConfig& config) {
  KvCacheScales s;
  s.num_kv_heads = config.num_key_value_heads;
  s.values.assign(static_cast<size_t>(config.num_hidden_layers) * 2 * config.num_key_value_heads, 1.0f);
  return s;
}

Result<KvCacheScales> LoadKvCacheScales(const SafetensorsModel& st, const ModelConfig& config) {
  KvCacheScales s = UnitKvCacheScales(config);
  int with = 0;
  std::string first_without;
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.self_attn.", l);
    const TensorView* k = FindFirst(st, {p + "k_scale", p + "k_proj.output_scale", p + "kv_scale"});
    const TensorView* v = FindFirst(st, {p + "v_scale", p + "v_proj.output_scale", p + "kv_scale"});
    if ((k == nullptr) != (v == nullptr)) {
      return Err(StatusCode::kInvalidArgument, "layer {}: a {} scale without its {} scale ({})", l,
                 k != nullptr ? "K" : "V", k != nullptr ? "V" : "K", (k != nullptr ? k : v)->name);
    }
    if (k == nullptr) {
      if (first_without.empty()) first_without = p + "k_scale";
      continue;
    }
    ++with;
    TANDEM_RETURN_IF_ERROR(ReadScales(*k, s.num_kv_heads, s.values.data() + static_cast<size_t>(l) * 2 * s.num_kv_heads));
    TANDEM_RETURN_IF_ERROR(ReadScales(*v, s.num_kv_heads, s.values.data() + (static_cast<size_t>(l) * 2 + 1) * s.num_kv_heads));
  }
  if (with > 0 && with < config.num_hidden_layers) {
    return Err(StatusCode::kInvalidArgument, "KV-cache scales in {} of {} layers ({} is missing)", with,
               config.num_hidden_layers, first_without);
  }
  s.calibrated = with > 0;
  return s;
}

}  // namespace tandem
