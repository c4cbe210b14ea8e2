// Model weights bound by their Hugging Face names and converted to fp32 for the CPU runner (FP8
// linear weights dequantized at load).
//
// Names (transformers' modeling_{llama,qwen2,qwen3,mistral}.py), shapes [out, in] row-major:
//   model.embed_tokens.weight                     [vocab, hidden]
//   model.layers.N.input_layernorm.weight         [hidden]
//   model.layers.N.self_attn.q_proj.weight        [num_heads * head_dim, hidden]     (+ .bias)
//   model.layers.N.self_attn.k_proj.weight        [num_kv_heads * head_dim, hidden]  (+ .bias)
//   model.layers.N.self_attn.v_proj.weight        [num_kv_heads * head_dim, hidden]  (+ .bias)
//   model.layers.N.self_attn.o_proj.weight        [hidden, num_heads * head_dim]
//        (+ .bias for Llama/Mistral/Qwen3 with attention_bias; Qwen2's o_proj has none)
//   model.layers.N.self_attn.{q,k}_norm.weight    [head_dim]                         (Qwen3)
//   model.layers.N.post_attention_layernorm.weight [hidden]
//   model.layers.N.mlp.{gate,up}_proj.weight      [intermediate, hidden]
//   model.layers.N.mlp.down_proj.weight           [hidden, intermediate]
//   model.norm.weight                             [hidden]
//   lm_head.weight                                [vocab, hidden]  (absent when tied: = embed)
//
// Errors: InvalidArgument naming the tensor when it is missing, or when its shape disagrees
// with the config (expected and actual shapes); Unimplemented for an unsupported dtype.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace tandem {

struct LayerWeights {
  std::vector<float> input_norm;   // [hidden]
  std::vector<float> q_proj;       // [num_heads * head_dim, hidden]
  std::vector<float> k_proj;       // [num_kv_heads * head_dim, hidden]
  std::vector<float> v_proj;       // [num_kv_heads * head_dim, hidden]
  std::vector<float> q_bias;       // [num_heads * head_dim] or empty
  std::vector<float> k_bias;       // [num_kv_heads * head_dim] or empty
  std::vector<float> v_bias;       // [num_kv_heads * head_dim] or empty
  std::vector<float> o_proj;       // [hidden, num_heads * head_dim]
  std::vector<float> o_bias;       // [hidden] or empty
  std::vector<float> q_norm;       // [head_dim] or empty (Qwen3)
  std::vector<float> k_norm;       // [head_dim] or empty (Qwen3)
  std::vector<float> post_norm;    // [hidden]
  std::vector<float> gate_proj;    // [intermediate, hidden]
  std::vector<float> up_proj;      // [intermediate, hidden]
  std::vector<float> down_proj;    // [hidden, intermediate]
};

struct ModelWeights {
  std::vector<float> embed;        // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;   // [hidden]
  std::vector<float> lm_head;      // [vocab, hidden]; empty when tied (use embed)

  const std::vector<float>& lm_head_or_embed() const { return lm_head.empty() ? embed : lm_head; }
};

// The tensor `name`, checked against the shape config.json implies: InvalidArgument naming the
// tensor when it is missing (with the expected shape) or misshapen (both shapes and its file).
// LoadModelWeights and the CUDA loader's plan (weight_plan.h) bind through it.
Result<const TensorView*> FindWeight(const SafetensorsModel& st, const std::string& name,
                                     const std::vector<int64_t>& expected);

// An F8_E4M3 weight [rows, cols] with its scales (kernels/cpu/fp8.h's block scheme): w[r][c] =
// code * scales[(r / block_rows) * ceil(cols / block_cols) + c / block_cols].
struct Fp8WeightView {
  const TensorView* codes = nullptr;
  std::vector<float> scales;
  int64_t block_rows = 0, block_cols = 0;  // the actual block (the whole dimension when q says 0)
};

// The scale tensor of the F8_E4M3 tensor `t` (named `name`, [rows, cols]) as q lays it out.
// Errors: InvalidArgument without quantization_config, for a missing or misshapen scale tensor
// (naming it and the shape the scheme needs), a non-finite scale.
Result<Fp8WeightView> FindFp8Scales(const SafetensorsModel& st, const std::string& name, const TensorView* t,
                                    int64_t rows, int64_t cols, const QuantizationConfig& q);

// A linear projection's weight [out, in] (`expected`) in fp32: as stored when BF16/F16/F32; when
// F8_E4M3, dequantized with its scale tensor (<name minus "weight"><q.scale_suffix>, laid out as
// q says; model/quantization.h, kernels/cpu/fp8.h); with q.source "online", quantized to FP8 per
// output channel and dequantized (so the CPU engine computes with what an FP8 engine would hold).
// Errors: those of FindWeight; InvalidArgument for an F8_E4M3 tensor without quantization_config,
// a missing or misshapen scale tensor (naming it and the shape the scheme needs), a non-finite
// scale.
Status BindLinear(const SafetensorsModel& st, const std::string& name, std::vector<int64_t> expected,
                  const QuantizationConfig& q, std::vector<float>* out);

// Binds and converts every tensor the config calls for; the linear projections (and lm_head when
// stored in FP8) through BindLinear with config.quantization. Any other tensor in F8_E4M3 is
// InvalidArgument.
Result<ModelWeights> LoadModelWeights(const SafetensorsModel& st, const ModelConfig& config);

}  // namespace tandem
