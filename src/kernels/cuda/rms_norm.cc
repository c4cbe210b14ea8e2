#include "kernels/cuda/rms_norm.h"

#include "kernels/cuda/cuda_check.h"

namespace tandem::cuda {
namespace {

Status Check(const RmsNormArgs& a, bool fused, const char* op) {
  if (a.num_rows < 0 || a.dim < 0 || a.num_rows > 2147483647) {
    return Err(StatusCode::kInvalidArgument, "{}: num_rows {}, dim {}", op, a.num_rows, a.dim);
  }
  if (a.num_rows == 0 || a.dim == 0) return Status::Ok();
  if (a.x == nullptr || a.y == nullptr || a.weight == nullptr || (fused && a.residual == nullptr)) {
    return Err(StatusCode::kInvalidArgument, "{}: null pointer", op);
  }
  if (a.x_stride < a.dim || a.y_stride < a.dim || (fused && a.res_stride < a.dim)) {
    return Err(StatusCode::kInvalidArgument, "{}: row strides (x {}, y {}, residual {}) below dim {}",
               op, a.x_stride, a.y_stride, a.res_stride, a.dim);
  }
  if (fused && (a.residual == a.x || a.residual == a.y)) {
    return Err(StatusCode::kInvalidArgument, "{}: residual aliases x or y", op);
  }
  return Status::Ok();
}

}  // namespace

Status RmsNorm(const RmsNormArgs& args, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(Check(args, false, "RmsNorm"));
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchRmsNorm(args, false, stream));
  return Status::Ok();
}

Status FusedAddRmsNorm(const RmsNormArgs& args, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(Check(args, true, "FusedAddRmsNorm"));
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchRmsNorm(args, true, stream));
  return Status::Ok();
}

}  // namespace tandem::cuda
