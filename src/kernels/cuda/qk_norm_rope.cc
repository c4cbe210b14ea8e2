#include "kernels/cuda/qk_norm_rope.h"

#include "kernels/cuda/cuda_check.h"

namespace tandem::cuda {

Status QkNormRope(const QkNormRopeArgs& a, cudaStream_t stream) {
  if (a.num_tokens < 0 || a.num_heads < 0 || a.num_kv_heads < 0) {
    return Err(StatusCode::kInvalidArgument, "QkNormRope: num_tokens {}, num_heads {}, "
               "num_kv_heads {}", a.num_tokens, a.num_heads, a.num_kv_heads);
  }
  if (a.head_dim <= 0 || a.head_dim % 2 != 0 || a.head_dim > 256) {
    return Err(StatusCode::kInvalidArgument, "QkNormRope: head_dim {} must be even and <= 256",
               a.head_dim);
  }
  if (a.num_tokens == 0) return Status::Ok();
  if ((a.num_heads > 0 && (a.q == nullptr || a.q_stride < int64_t{a.num_heads} * a.head_dim)) ||
      (a.num_kv_heads > 0 && (a.k == nullptr || a.k_stride < int64_t{a.num_kv_heads} * a.head_dim))) {
    return Err(StatusCode::kInvalidArgument, "QkNormRope: q/k null or row stride (q {}, k {}) "
               "below heads * head_dim", a.q_stride, a.k_stride);
  }
  if (a.positions == nullptr || a.inv_freq == nullptr) {
    return Err(StatusCode::kInvalidArgument, "QkNormRope: null positions or inv_freq");
  }
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchQkNormRope(a, stream));
  return Status::Ok();
}

}  // namespace tandem::cuda
