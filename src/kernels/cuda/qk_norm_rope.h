// Per-head q/k RMSNorm (Qwen3's q_norm/k_norm; optional) followed by rotary position embedding,
// in place on bf16 q and k: the CUDA twin of kernels/cpu/rms_norm.h over head_dim plus
// kernels/cpu/rope.h (ApplyRope, "neox" rotate-half layout of HF apply_rotary_pos_emb):
//   n = q_norm ? bf16(w * bf16(x * rsqrt(mean(x^2) + eps))) : x        (per head, fp32 math)
//   x'[i]        = n[i] * cos(pos * inv_freq[i]) - n[i + d/2] * sin(pos * inv_freq[i])
//   x'[i + d/2]  = n[i + d/2] * cos(...)          + n[i] * sin(...)        i < d/2, one bf16 rounding
// inv_freq comes from cpu::RopeInvFreq (default | linear | llama3), uploaded once as fp32; the angle
// is one fp32 product pos * inv_freq[i] as in HF, cos/sin by sincosf (full range reduction).
//
// q and k may be slices of one fused qkv buffer: each has its own row stride (elements between
// consecutive tokens); heads of a token are contiguous. Device pointers; asynchronous on `stream`.
//
// QkNormRopeCache fuses this with ReshapeAndCache (reshape_and_cache.h) for the runner's layer
// loop, decode and prefill tokens alike: q is normed and rotated in place exactly as QkNormRope
// does; k is normed and rotated and written, with v copied, into the paged KV pool at the token's
// slot (bit for bit what QkNormRope then ReshapeAndCache store). The k slice of the input is left
// as it was (attention reads K from the pool). One launch instead of two.
// With kv_pool_fp8 (--kv-cache-dtype fp8) the pool holds FP8 E4M3 codes instead: each stored
// element is FloatToFp8(bf16 value / its KV head's scale), round to nearest even, saturating at
// +-448 (what cpu::ReshapeAndCacheFp8 does to the same bf16 values; kernels/cpu/fp8.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

struct QkNormRopeArgs {
  __nv_bfloat16* q = nullptr;  // [num_tokens, num_heads, head_dim], row stride q_stride
  int64_t q_stride = 0;
  __nv_bfloat16* k = nullptr;  // [num_tokens, num_kv_heads, head_dim], row stride k_stride
  int64_t k_stride = 0;
  const __nv_bfloat16* q_norm = nullptr;  // [head_dim], or nullptr: no q norm
  const __nv_bfloat16* k_norm = nullptr;  // [head_dim], or nullptr: no k norm
  const int32_t* positions = nullptr;     // [num_tokens]
  const float* inv_freq = nullptr;        // [head_dim / 2]
  int num_tokens = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // even, at most 256
  float eps = 1e-6f;
};

struct QkNormRopeCacheArgs {
  QkNormRopeArgs rope;  // q, k (read only here), norms, positions, inv_freq, shapes
  const __nv_bfloat16* v = nullptr;  // [num_tokens, num_kv_heads, head_dim], row stride v_stride
  int64_t v_stride = 0;
  const int64_t* slot_mapping = nullptr;  // [num_tokens]; < num_blocks * block_size, or < 0: skip
  __nv_bfloat16* kv_pool = nullptr;       // [num_blocks, 2, block_size, num_kv_heads, head_dim]
  // FP8 KV instead (kv_pool null): the same layout, one byte an element; k_scales / v_scales
  // [num_kv_heads] fp32 (device; null: 1.0).
  uint8_t* kv_pool_fp8 = nullptr;
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
  int block_size = 0;
};

namespace detail {
cudaError_t LaunchQkNormRope(const QkNormRopeArgs& args, cudaStream_t stream);
cudaError_t LaunchQkNormRopeCache(const QkNormRopeCacheArgs& args, cudaStream_t stream);
}  // namespace detail
}  // namespace tandem::cuda

#ifndef __CUDACC__
#include "common/status.h"

namespace tandem::cuda {

// Errors: InvalidArgument (odd or > 256 head_dim, strides too small, null pointers), Internal (CUDA).
Status QkNormRope(const QkNormRopeArgs& args, cudaStream_t stream);
// Errors: as QkNormRope, and InvalidArgument for num_kv_heads == 0, a null v / slot_mapping, not
// exactly one of kv_pool and kv_pool_fp8, block_size <= 0 or v's row stride below num_kv_heads * head_dim. Slots are not checked
// against the pool (device values).
Status QkNormRopeCache(const QkNormRopeCacheArgs& args, cudaStream_t stream);

}  // namespace tandem::cuda
#endif
