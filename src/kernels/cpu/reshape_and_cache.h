// Writes new K/V rows into a paged KV pool (vLLM's reshape_and_cache).
// Pool layout (one layer): [num_blocks, 2 (K,V), block_size, num_kv_heads, head_dim];
// slot s = block_id * block_size + offset.
#pragma once

#include <cstdint>

namespace tandem::cpu {

// k, v: [num_tokens, num_kv_heads, head_dim]; slot_mapping: [num_tokens] (valid slots).
void ReshapeAndCache(const float* k, const float* v, int num_tokens, const int64_t* slot_mapping,
                     int block_size, int num_kv_heads, int head_dim, float* kv_pool);

// The same into an FP8 E4M3 pool (one byte an element, same layout): each element divided by its
// KV head's scale (k_scale / v_scale: [num_kv_heads]), then rounded to nearest even and saturated
// to +-448 (kernels/cpu/fp8.h), as vLLM's fp8 KV cache stores x / scale.
void ReshapeAndCacheFp8(const float* k, const float* v, int num_tokens, const int64_t* slot_mapping,
                        int block_size, int num_kv_heads, int head_dim, const float* k_scale,
                        const float* v_scale, uint8_t* kv_pool);

// Offset (in elements) of K (kv = 0) or V (kv = 1) of `slot` in a layer's pool.
inline long KVSlotOffset(int64_t slot, int kv, int block_size, int num_kv_heads, int head_dim) {
  const long row = static_cast<long>(num_kv_heads) * head_dim;
  const int64_t block = slot / block_size;
  const int64_t offset = slot % block_size;
  return ((block * 2 + kv) * block_size + offset) * row;
}

}  // namespace tandem::cpu
