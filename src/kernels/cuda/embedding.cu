#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/embedding.h"

namespace tandem::cuda::detail {
namespace {

// One block per token. vec: dim % 8 == 0 and both tensors 16-byte aligned (uint4 copies).
template <bool kVec>
__global__ void EmbeddingKernel(const int32_t* __restrict__ ids, const __nv_bfloat16* __restrict__ table,
                                int vocab, int dim, __nv_bfloat16* __restrict__ out) {
  const int t = blockIdx.x;
  const int id = ids[t];
  __nv_bfloat16* dst = out + static_cast<int64_t>(t) * dim;
  const bool valid = id >= 0 && id < vocab;
  const __nv_bfloat16* src = table + static_cast<int64_t>(valid ? id : 0) * dim;
  if constexpr (kVec) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (int i = threadIdx.x; i < dim / 8; i += blockDim.x) d[i] = valid ? s[i] : make_uint4(0, 0, 0, 0);
  } else {
    for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = valid ? src[i] : __float2bfloat16(0.0f);
  }
}

}  // namespace

cudaError_t LaunchEmbedding(const int32_t* ids, int num_tokens, const __nv_bfloat16* table,
                            int vocab, int dim, __nv_bfloat16* out, cudaStream_t stream) {
  if (num_tokens == 0 || dim == 0) return cudaSuccess;
  const bool vec = dim % 8 == 0 && Aligned16(table) && Aligned16(out);
  const int threads = vec ? (dim / 8 < 256 ? ((dim / 8 + 31) / 32) * 32 : 256) : 256;
  if (vec) {
    TANDEM_LAUNCH(EmbeddingKernel<true>, num_tokens, threads, 0, stream, ids, table, vocab, dim, out);
  } else {
    TANDEM_LAUNCH(EmbeddingKernel<false>, num_tokens, threads, 0, stream, ids, table, vocab, dim, out);
  }
  return cudaGetLastError();
}

}  // namespace tandem::cuda::detail
