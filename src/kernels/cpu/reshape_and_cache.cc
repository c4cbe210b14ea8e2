#include "kernels/cpu/reshape_and_cache.h"

#include <cstring>

#include "kernels/cpu/fp8.h"

namespace tandem::cpu {

void ReshapeAndCache(const float* k, const float* v, int num_tokens, const int64_t* slot_mapping,
                     int block_size, int num_kv_heads, int head_dim, float* kv_pool) {
  const long row = static_cast<long>(num_kv_heads) * head_dim;
  for (int t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    std::memcpy(kv_pool + KVSlotOffset(slot, 0, block_size, num_kv_heads, head_dim), k + t * row,
                sizeof(float) * row);
    std::memcpy(kv_pool + KVSlotOffset(slot, 1, block_size, num_kv_heads, head_dim), v + t * row,
                sizeof(float) * row);
  }
}

void ReshapeAndCacheFp8(const float* k, const float* v, int num_tokens, const int64_t* slot_mapping,
                        int block_size, int num_kv_heads, int head_dim, const float* k_scale,
                        const float* v_scale, uint8_t* kv_pool) {
  const long row = static_cast<long>(num_kv_heads) * head_dim;
  for (int t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    uint8_t* dk = kv_pool + KVSlotOffset(slot, 0, block_size, num_kv_heads, head_dim);
    uint8_t* dv = kv_pool + KVSlotOffset(slot, 1, block_size, num_kv_heads, head_dim);
    for (int h = 0; h < num_kv_heads; ++h) {
      const float ik = 1.0f / k_scale[h], iv = 1.0f / v_scale[h];
      for (int e = 0; e < head_dim; ++e) {
        const long i = static_cast<long>(h) * head_dim + e;
        dk[i] = FloatToFp8E4M3(k[t * row + i] * ik);
        dv[i] = FloatToFp8E4M3(v[t * row + i] * iv);
      }
    }
  }
}

}  // namespace tandem::cpu
