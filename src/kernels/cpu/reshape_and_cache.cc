#include "kernels/cpu/reshape_and_cache.h"

#include <cstring>

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

}  // namespace tandem::cpu
