// The CUDA loader's plan (cuda_weights.h), made without a device: where every checkpoint tensor
// goes inside the runner's bf16 device tensors (q/k/v and gate/up fused row-wise), how it is
// converted to bf16 on the host, and how the bytes pass through a pinned staging buffer in
// chunks. The device code only allocates, fills chunks with FillStagingChunk and copies them.
//
// Device tensors ([out, in] row-major; Hugging Face names in weights.h):
//   embed      [vocab, hidden]                      model.embed_tokens.weight
//   final_norm [hidden]                             model.norm.weight
//   lm_head    [vocab, hidden]                      lm_head.weight; no parts when tied (use embed)
//   per layer: input_norm [hidden], post_norm [hidden],
//     qkv      [(nh + 2 nkv) * hd, hidden]          q_proj, k_proj, v_proj rows
//     qkv_bias [(nh + 2 nkv) * hd]                  q/k/v_proj.bias (attention_bias) or no parts
//     o        [hidden, nh * hd], o_bias [hidden]   o_proj (+ .bias: attention_bias, not Qwen2)
//     q_norm, k_norm [hd]                           Qwen3 (qk_norm) or no parts
//     gate_up  [2 * inter, hidden]                  gate_proj rows, then up_proj rows
//     down     [hidden, inter]
// Conversion: BF16 is copied as stored; F16 and F32 are rounded to the nearest bf16 (ties to
// even; NaN stays NaN), as __float2bfloat16_rn does.
// Errors (PlanBf16Weights): those of LoadModelWeights, with the same messages (FindWeight:
// missing or misshapen tensor), and Unimplemented for a dtype other than BF16/F16/F32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace tandem {

// One checkpoint tensor's place in a device tensor.
struct WeightPart {
  const TensorView* src = nullptr;
  int64_t dst_offset = 0;  // elements from the start of the device tensor
};

// One device tensor: its parts laid end to end cover [0, num_elements) exactly.
struct DeviceTensorPlan {
  std::string name;  // "embed", "layers.3.qkv", ...
  int64_t num_elements = 0;
  std::vector<WeightPart> parts;  // empty: the tensor is absent (tied lm_head, no bias)

  size_t bytes() const { return static_cast<size_t>(num_elements) * 2; }  // bf16
};

struct LayerPlan {
  DeviceTensorPlan input_norm, qkv, qkv_bias, o, o_bias, q_norm, k_norm, post_norm, gate_up, down;
};

struct WeightPlan {
  DeviceTensorPlan embed, final_norm, lm_head;
  std::vector<LayerPlan> layers;

  // Every present tensor (with parts).
  std::vector<const DeviceTensorPlan*> tensors() const;
  size_t total_bytes() const;  // bf16 bytes of every present tensor
};

// skip_linears: the layers' qkv, o, gate_up and down are left out (no parts, not looked up): the
// FP8 loader packs them itself (fp8_pack.h).
Result<WeightPlan> PlanBf16Weights(const SafetensorsModel& st, const ModelConfig& config,
                                   bool skip_linears = false);

// A run of one part's elements in a staging chunk.
struct StagingPiece {
  const DeviceTensorPlan* tensor = nullptr;
  const TensorView* src = nullptr;
  int64_t src_begin = 0;        // first element of src
  int64_t count = 0;            // elements
  int64_t dst_offset = 0;       // element of the device tensor receiving src_begin
  size_t staging_offset = 0;    // bytes into the chunk's buffer
};

struct StagingChunk {
  std::vector<StagingPiece> pieces;
  size_t bytes = 0;  // used bytes of the buffer
};

// Every part of every tensor cut into chunks of at most `chunk_bytes` (even, >= 2), the parts in
// the order of their bytes in the files (sequential reads of the mapped checkpoint).
std::vector<StagingChunk> ScheduleStaging(const WeightPlan& plan, size_t chunk_bytes);

// Converts the chunk's pieces into `buffer` (chunk.bytes bytes of bf16), with `num_threads`
// threads (>= 1) over equal byte ranges.
void FillStagingChunk(const StagingChunk& chunk, uint16_t* buffer, int num_threads);

// Drops the mapped checkpoint pages the chunk read from this process's resident set
// (madvise(MADV_DONTNEED) on the read-only mapping; the page cache keeps them and a later read
// faults them back in), so loading a model holds little more than the staging buffers.
void ReleaseChunkSources(const StagingChunk& chunk);

// Elements [begin, begin + count) of `t` as bf16 bits. t.dtype must be BF16, F16 or F32.
void ConvertToBf16(const TensorView& t, int64_t begin, int64_t count, uint16_t* out);

// Round to nearest even (ties to even); NaN -> a quiet NaN of the same sign.
uint16_t FloatToBfloat16Bits(float f);

}  // namespace tandem
