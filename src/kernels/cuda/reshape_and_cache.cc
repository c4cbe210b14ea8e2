#include "kernels/cuda/reshape_and_cache.h"

#include "kernels/cuda/cuda_check.h"

namespace tandem::cuda {

Status ReshapeAndCache(const ReshapeAndCacheArgs& a, cudaStream_t stream) {
  if (a.num_tokens < 0 || a.block_size <= 0 || a.num_kv_heads <= 0 || a.head_dim <= 0) {
    return Err(StatusCode::kInvalidArgument, "ReshapeAndCache: num_tokens {}, block_size {}, "
               "num_kv_heads {}, head_dim {}", a.num_tokens, a.block_size, a.num_kv_heads,
               a.head_dim);
  }
  if (a.num_tokens == 0) return Status::Ok();
  if (a.k == nullptr || a.v == nullptr || a.slot_mapping == nullptr || a.kv_pool == nullptr) {
    return Err(StatusCode::kInvalidArgument, "ReshapeAndCache: null pointer");
  }
  const int64_t row = int64_t{a.num_kv_heads} * a.head_dim;
  if (a.k_stride < row || a.v_stride < row) {
    return Err(StatusCode::kInvalidArgument, "ReshapeAndCache: row strides (k {}, v {}) below "
               "num_kv_heads * head_dim = {}", a.k_stride, a.v_stride, row);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchReshapeAndCache(a, stream));
  return Status::Ok();
}

}  // namespace tandem::cuda
