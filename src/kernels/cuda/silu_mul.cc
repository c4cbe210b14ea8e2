#include "kernels/cuda/silu_mul.h"

#include "kernels/cuda/cuda_check.h"

namespace tandem::cuda {

Status SiluMul(const SiluMulArgs& a, cudaStream_t stream) {
  if (a.num_tokens < 0 || a.dim < 0) {
    return Err(StatusCode::kInvalidArgument, "SiluMul: num_tokens {}, dim {}",
               a.num_tokens, a.dim);
  }
  if (a.num_tokens == 0 || a.dim == 0) return Status::Ok();
  if (a.gate == nullptr || a.up == nullptr || a.out == nullptr) {
    return Err(StatusCode::kInvalidArgument, "SiluMul: null pointer");
  }
  if (a.gate_stride < a.dim || a.up_stride < a.dim || a.out_stride < a.dim) {
    return Err(StatusCode::kInvalidArgument, "SiluMul: row strides (gate {}, up {}, out {}) "
               "below dim {}", a.gate_stride, a.up_stride, a.out_stride, a.dim);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchSiluMul(a, stream));
  return Status::Ok();
}

}  // namespace tandem::cuda
