#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/reshape_and_cache.h"

namespace tandem::cuda::detail {
namespace {

// One block per token: copies the token's K row and V row (num_kv_heads * head_dim each).
template <bool kVec>
__global__ void ReshapeAndCacheKernel(ReshapeAndCacheArgs a) {
  const int64_t t = blockIdx.x;
  const int64_t slot = a.slot_mapping[t];
  if (slot < 0) return;
  const int64_t row = static_cast<int64_t>(a.num_kv_heads) * a.head_dim;
  const int64_t block = slot / a.block_size;
  const int64_t offset = slot % a.block_size;
  __nv_bfloat16* k_dst = a.kv_pool + ((block * 2 + 0) * a.block_size + offset) * row;
  __nv_bfloat16* v_dst = a.kv_pool + ((block * 2 + 1) * a.block_size + offset) * row;
  const __nv_bfloat16* k_src = a.k + t * a.k_stride;
  const __nv_bfloat16* v_src = a.v + t * a.v_stride;
  if constexpr (kVec) {
    for (int64_t i = threadIdx.x; i < row / 8; i += blockDim.x) {
      reinterpret_cast<uint4*>(k_dst)[i] = reinterpret_cast<const uint4*>(k_src)[i];
      reinterpret_cast<uint4*>(v_dst)[i] = reinterpret_cast<const uint4*>(v_src)[i];
    }
  } else {
    for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
      k_dst[i] = k_src[i];
      v_dst[i] = v_src[i];
    }
  }
}

}  // namespace

cudaError_t LaunchReshapeAndCache(const ReshapeAndCacheArgs& a, cudaStream_t stream) {
  if (a.num_tokens == 0) return cudaSuccess;
  const int64_t row = static_cast<int64_t>(a.num_kv_heads) * a.head_dim;
  const bool vec = row % 8 == 0 && a.k_stride % 8 == 0 && a.v_stride % 8 == 0 &&
                   Aligned16(a.k) && Aligned16(a.v) && Aligned16(a.kv_pool);
  const int64_t work = vec ? row / 8 : row;
  const int threads = work >= 256 ? 256 : static_cast<int>(((work + 31) / 32) * 32);
  if (vec) {
    TANDEM_LAUNCH(ReshapeAndCacheKernel<true>, a.num_tokens, threads, 0, stream, a);
  } else {
    TANDEM_LAUNCH(ReshapeAndCacheKernel<false>, a.num_tokens, threads, 0, stream, a);
  }
  return cudaGetLastError();
}

}  // namespace tandem::cuda::detail
