#include "kernels/cuda/qk_norm_rope.h"

#include "kernels/cuda/cuda_check.h"

namespace tandem::cuda {
namespace {

Status CheckRope(const char* op, const QkNormRopeArgs& a) {
  if (a.num_tokens < 0 || a.num_heads < 0 || a.num_kv_heads < 0) {
    return Err(StatusCode::kInvalidArgument, "{}: num_tokens {}, num_heads {}, num_kv_heads {}", op,
               a.num_tokens, a.num_heads, a.num_kv_heads);
  }
  if (a.head_dim <= 0 || a.head_dim % 2 != 0 || a.head_dim > 256) {
    return Err(StatusCode::kInvalidArgument, "{}: head_dim {} must be even and <= 256", op,
               a.head_dim);
  }
  if (a.num_tokens == 0) return Status::Ok();
  if ((a.num_heads > 0 && (a.q == nullptr || a.q_stride < int64_t{a.num_heads} * a.head_dim)) ||
      (a.num_kv_heads > 0 && (a.k == nullptr || a.k_stride < int64_t{a.num_kv_heads} * a.head_dim))) {
    return Err(StatusCode::kInvalidArgument, "{}: q/k null or row stride (q {}, k {}) below "
               "heads * head_dim", op, a.q_stride, a.k_stride);
  }
  if (a.positions == nullptr || a.inv_freq == nullptr) {
    return Err(StatusCode::kInvalidArgument, "{}: null positions or inv_freq", op);
  }
  return Status::Ok();
}

}  // namespace

Status QkNormRope(const QkNormRopeArgs& a, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckRope("QkNormRope", a));
  if (a.num_tokens == 0) return Status::Ok();
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchQkNormRope(a, stream));
  return Status::Ok();
}

Status QkNormRopeCache(const QkNormRopeCacheArgs& c, cudaStream_t stream) {
  const QkNormRopeArgs& a = c.rope;
  TANDEM_RETURN_IF_ERROR(CheckRope("QkNormRopeCache", a));
  if (a.num_kv_heads == 0 || c.block_size <= 0) {
    return Err(StatusCode::kInvalidArgument, "QkNormRopeCache: num_kv_heads {}, block_size {}",
               a.num_kv_heads, c.block_size);
  }
  if (a.num_tokens == 0) return Status::Ok();
  if (c.v == nullptr || c.slot_mapping == nullptr || (c.kv_pool == nullptr) == (c.kv_pool_fp8 == nullptr) ||
      c.v_stride < int64_t{a.num_kv_heads} * a.head_dim) {
    return Err(StatusCode::kInvalidArgument, "QkNormRopeCache: null v / slot_mapping, not exactly one of "
               "kv_pool and kv_pool_fp8, or v row stride {} below num_kv_heads * head_dim", c.v_stride);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchQkNormRopeCache(c, stream));
  return Status::Ok();
}

}  // namespace tandem::cuda
