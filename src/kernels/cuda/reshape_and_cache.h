// Writes new K/V rows into a layer's paged KV pool on the GPU (vLLM's reshape_and_cache; the CUDA
// twin of kernels/cpu/reshape_and_cache.h), bf16, copied bit for bit.
// Pool layout (one layer): [num_blocks, 2 (K,V), block_size, num_kv_heads, head_dim];
// slot s = block_id * block_size + offset. A negative slot skips the token (padding).
// k and v may be slices of a fused qkv buffer (row strides in elements). Device pointers; async.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

struct ReshapeAndCacheArgs {
  const __nv_bfloat16* k = nullptr;  // [num_tokens, num_kv_heads, head_dim], row stride k_stride
  int64_t k_stride = 0;
  const __nv_bfloat16* v = nullptr;  // [num_tokens, num_kv_heads, head_dim], row stride v_stride
  int64_t v_stride = 0;
  const int64_t* slot_mapping = nullptr;  // [num_tokens]; slots < num_blocks * block_size, or < 0
  __nv_bfloat16* kv_pool = nullptr;       // [num_blocks, 2, block_size, num_kv_heads, head_dim]
  int num_tokens = 0;
  int block_size = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
};

namespace detail {
cudaError_t LaunchReshapeAndCache(const ReshapeAndCacheArgs& args, cudaStream_t stream);
}  // namespace detail
}  // namespace tandem::cuda

#ifndef __CUDACC__
#include "common/status.h"

namespace tandem::cuda {

// Errors: InvalidArgument (sizes, strides, null pointers), Internal (CUDA). Slots are not checked
// against the pool size (they live on the device): the caller builds them from valid block ids.
Status ReshapeAndCache(const ReshapeAndCacheArgs& args, cudaStream_t stream);

}  // namespace tandem::cuda
#endif
