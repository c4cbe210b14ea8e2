// Weight quantization: what a checkpoint's config.json `quantization_config` says, or what
// --quantization asks for at load.
//
// Formats read (each FP8 E4M3, kernels/cpu/fp8.h; activations are not quantized by the CPU engine,
// which dequantizes the weights to fp32 once at load):
//   transformers FineGrainedFP8 / DeepSeek-V3 style (Qwen/Qwen3-8B-FP8):
//     {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
//      "weight_block_size": [128, 128]}
//     <linear>.weight F8_E4M3 [out, in], <linear>.weight_scale_inv [ceil(out/128), ceil(in/128)];
//     without weight_block_size (vLLM's serialized fp8): <linear>.weight_scale per tensor.
//   compressed-tensors (llm-compressor, as Neural Magic / Red Hat publish), format
//     "float-quantized" (or "naive-quantized") whose config_groups' weights are
//     {"num_bits": 8, "type": "float", "strategy": "tensor" | "channel" | "block"
//      (+ "block_structure": [r, c])}: <linear>.weight F8_E4M3, <linear>.weight_scale
//     [1] or [] (tensor), [out, 1] (channel), [ceil(out/r), ceil(in/c)] (block).
// A tensor stored in F8_E4M3 is quantized; the others (embeddings, norms, an ignored lm_head) are
// read as stored. Scales may be F32, BF16 or F16.
//
// Errors (ParseQuantizationConfig): Unimplemented naming any other quant_method (awq, gptq,
// bitsandbytes, ...), format, fmt (e5m2) or weight type; InvalidArgument for a malformed field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"

namespace tandem {

struct QuantizationConfig {
  enum class Method { kNone, kFp8 };
  Method method = Method::kNone;
  // Where it comes from: "fp8" (transformers FineGrainedFP8 / vLLM fp8), "compressed-tensors",
  // or "online" (--quantization fp8 on an unquantized checkpoint: per-channel at load).
  std::string source;
  // The scale blocks of a weight [out, in]: 0 means the whole dimension (block_rows == 1 and
  // block_cols == 0 is per-channel; 0 and 0 per-tensor).
  int64_t block_rows = 0;
  int64_t block_cols = 0;
  std::string scale_suffix = "weight_scale";  // "weight_scale_inv" for transformers' fp8

  bool enabled() const { return method != Method::kNone; }
  // "fp8 e4m3 (compressed-tensors; scales per output channel)"; "none".
  std::string Describe() const;
};

// `quantization_config` of config.json (`file` names it in errors); null or absent -> kNone.
Result<QuantizationConfig> ParseQuantizationConfig(const nlohmann::json& q, const std::string& file);

// --quantization: "" or "none" (the checkpoint's own), "fp8". On a checkpoint already FP8 the
// checkpoint's scheme stays; on an unquantized one, per-channel FP8 at load ("online").
// InvalidArgument for any other name, listing the accepted ones.
Result<QuantizationConfig> ResolveQuantization(const QuantizationConfig& checkpoint,
                                               const std::string& requested);

// --kv-cache-dtype (vLLM's names): "auto" keeps the engine's own KV dtype (fp32 on the CPU, bf16 on
// CUDA); "fp8" and "fp8_e4m3" store K and V as FP8 E4M3, each element divided by its layer's and KV
// head's scale (1.0 until calibrated scales are loaded: vLLM's default without k_scale/v_scale),
// a quarter of the CPU pool's bytes and half of bf16's. InvalidArgument for anything else.
enum class KvCacheDtype { kAuto, kFp8E4M3 };
Result<KvCacheDtype> ParseKvCacheDtype(const std::string& name);

}  // namespace tandem
