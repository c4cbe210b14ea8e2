// Model weights bound by their Hugging Face names for the CPU runner. The matrices (linear
// projections, embedding, lm_head) stay in the checkpoint's dtype, read in place from the mapped
// safetensors file (no copy: resident memory is the file's pages the kernels touch); FP8 linear
// weights are dequantized to fp32 at load, as are the small vectors (norms, biases).
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

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/cpu/weight_matrix.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace tandem {

// A matrix [rows, cols] as the kernels take it (kernels/cpu/matmul.h): a BF16/F16/F32 tensor in
// place in the mapping (`mapped`), or fp32 made at load (`owned`: an FP8 checkpoint dequantized,
// --quantization fp8, a tensor the mapping holds misaligned).
struct MatrixWeight {
  cpu::WeightMatrix mapped;   // rows and cols always; data null when `owned` holds the values
  std::vector<float> owned;   // [rows, cols] or empty

  cpu::WeightMatrix matrix() const {
    if (owned.empty()) return mapped;
    return cpu::WeightMatrix{cpu::WeightType::kF32, owned.data(), mapped.rows, mapped.cols};
  }
  bool empty() const { return mapped.data == nullptr && owned.empty(); }
  // The values in fp32 (a copy; exact): for tests and tools.
  std::vector<float> ToFloat() const;
  // Bytes the values take (in the mapping or owned).
  size_t bytes() const;
};

struct LayerWeights {
  std::vector<float> input_norm;   // [hidden]
  MatrixWeight q_proj;             // [num_heads * head_dim, hidden]
  MatrixWeight k_proj;             // [num_kv_heads * head_dim, hidden]
  MatrixWeight v_proj;             // [num_kv_heads * head_dim, hidden]
  std::vector<float> q_bias;       // [num_heads * head_dim] or empty
  std::vector<float> k_bias;       // [num_kv_heads * head_dim] or empty
  std::vector<float> v_bias;       // [num_kv_heads * head_dim] or empty
  MatrixWeight o_proj;             // [hidden, num_heads * head_dim]
  std::vector<float> o_bias;       // [hidden] or empty
  std::vector<float> q_norm;       // [head_dim] or empty (Qwen3)
  std::vector<float> k_norm;       // [head_dim] or empty (Qwen3)
  std::vector<float> post_norm;    // [hidden]
  MatrixWeight gate_proj;          // [intermediate, hidden]
  MatrixWeight up_proj;            // [intermediate, hidden]
  MatrixWeight down_proj;          // [hidden, intermediate]
};

struct ModelWeights {
  std::shared_ptr<const SafetensorsModel> source;  // the mapping the matrices point into
  MatrixWeight embed;              // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;   // [hidden]
  MatrixWeight lm_head;            // [vocab, hidden]; empty when tied (use embed: not duplicated)

  const MatrixWeight& lm_head_or_embed() const { return lm_head.empty() ? embed : lm_head; }
  // Bytes of all matrices (each once) and vectors.
  size_t bytes() const;
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

// A linear projection's weight [out, in] (`expected`): in place in st's mapping when BF16/F16/F32
// (out then points into st: keep st alive while out is used); when F8_E4M3, dequantized to fp32
// with its scale tensor (<name minus "weight"><q.scale_suffix>, laid out as
// q says; model/quantization.h, kernels/cpu/fp8.h); with q.source "online", quantized to FP8 per
// output channel and dequantized (so the CPU engine computes with what an FP8 engine would hold).
// Errors: those of FindWeight; InvalidArgument for an F8_E4M3 tensor without quantization_config,
// a missing or misshapen scale tensor (naming it and the shape the scheme needs), a non-finite
// scale.
// Unimplemented for a dtype other than BF16/F16/F32/F8_E4M3.
Status BindLinear(const SafetensorsModel& st, const std::string& name, std::vector<int64_t> expected,
                  const QuantizationConfig& q, MatrixWeight* out);

// Binds every tensor the config calls for; the linear projections (and lm_head when stored in FP8)
// through BindLinear with config.quantization, the embedding in place, the vectors in fp32. Any
// other tensor in F8_E4M3 is InvalidArgument. The weights keep st (ModelWeights::source).
Result<ModelWeights> LoadModelWeights(std::shared_ptr<const SafetensorsModel> st, const ModelConfig& config);

}  // namespace tandem
