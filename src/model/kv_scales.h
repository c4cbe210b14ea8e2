// Calibrated FP8 KV-cache scales from a checkpoint (issue 28): per layer, the scale of K and of V,
// one per KV head or one for the layer, as vLLM reads them for --kv-cache-dtype fp8 (the
// `k_scale` / `v_scale` parameters of its attention layers, which compressed-tensors, ModelOpt
// and AutoFP8 checkpoints carry): a K value k is stored as the e4m3 code of k / k_scale and read
// back as code * k_scale (kernels/cpu/fp8.h for the format). Without them every scale is 1.0
// (vLLM's default), which is what an uncalibrated checkpoint gets.
//
// Tensor names (the first one found per layer N; F32, BF16 or F16; shape [], [1] or
// [num_key_value_heads]):
//   model.layers.N.self_attn.k_scale, model.layers.N.self_attn.v_scale        (vLLM's names)
//   model.layers.N.self_attn.k_proj.output_scale, ...v_proj.output_scale     (ModelOpt)
//   model.layers.N.self_attn.kv_scale                                          (older AutoFP8: K and V)
// Errors (InvalidArgument, naming the tensor): some layers with scales and others without, a K
// scale without its V scale, a shape other than the above, a scale that is not finite and > 0.
#pragma once

#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace tandem {

struct KvCacheScales {
  int num_kv_heads = 0;
  bool calibrated = false;    // read from the checkpoint (else all 1.0)
  std::vector<float> values;  // [num_layers, 2, num_kv_heads]: layer l's K scales, then its V scales

  const float* k(int layer) const { return values.data() + static_cast<size_t>(layer) * 2 * num_kv_heads; }
  const float* v(int layer) const { return k(layer) + num_kv_heads; }
};

// All 1.0: a config's layers and KV heads.
KvCacheScales UnitKvCacheScales(const ModelConfig& config);
// The checkpoint's scales, or UnitKvCacheScales when it has none.
Result<KvCacheScales> LoadKvCacheScales(const SafetensorsModel& st, const ModelConfig& config);

}  // namespace tandem
