#include "kernels/cuda/sampling.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_limits.h"

namespace tandem::cuda {
namespace {

Status CheckRows(const char* op, const float* x, int64_t ldx, int num_rows, int n) {
  if (num_rows < 0 || n < 0 || (num_rows > 0 && n > 0 && (x == nullptr || ldx < n))) {
    return Err(StatusCode::kInvalidArgument, "{}: num_rows {}, n {}, row stride {}, x {}", op,
               num_rows, n, ldx, static_cast<const void*>(x));
  }
  return Status::Ok();
}

}  // namespace

Status LogSoftmax(const float* x, int64_t ldx, int num_rows, int n, float* out, int64_t ldo,
                  cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckRows("LogSoftmax", x, ldx, num_rows, n));
  if (num_rows > 0 && n > 0 && (out == nullptr || ldo < n)) {
    return Err(StatusCode::kInvalidArgument, "LogSoftmax: out null or row stride {} < n {}", ldo, n);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchLogSoftmax(x, ldx, num_rows, n, out, ldo, stream));
  return Status::Ok();
}

Status Argmax(const float* x, int64_t ldx, int num_rows, int n, int32_t* ids, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckRows("Argmax", x, ldx, num_rows, n));
  if (num_rows > 0 && (n == 0 || ids == nullptr)) {
    return Err(StatusCode::kInvalidArgument, "Argmax: empty rows or null ids");
  }
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchArgmax(x, ldx, num_rows, n, ids, stream));
  return Status::Ok();
}

Status ArgmaxLogSumExp(const float* x, int64_t ldx, int num_rows, int n, int32_t* ids,
                       float* max_values, float* lse, cudaStream_t stream, void* workspace,
                       size_t workspace_bytes) {
  TANDEM_RETURN_IF_ERROR(CheckRows("ArgmaxLogSumExp", x, ldx, num_rows, n));
  if (num_rows > 0 && (n == 0 || ids == nullptr || max_values == nullptr || lse == nullptr)) {
    return Err(StatusCode::kInvalidArgument, "ArgmaxLogSumExp: empty rows or null outputs");
  }
  const int chunks = detail::ArgmaxLogSumExpChunks(num_rows, n, CurrentDeviceLimits().sm_count);
  const bool split = chunks > 1 && workspace != nullptr &&
                     workspace_bytes >= static_cast<size_t>(num_rows) * chunks * detail::kArgmaxLsePartBytes;
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchArgmaxLogSumExp(x, ldx, num_rows, n, ids, max_values, lse,
                                                            stream, split ? chunks : 1,
                                                            split ? workspace : nullptr));
  return Status::Ok();
}

size_t ArgmaxLogSumExpWorkspaceBytes(int num_rows) {
  return static_cast<size_t>(std::max(num_rows, 0)) * detail::kMaxArgmaxLseChunks *
         detail::kArgmaxLsePartBytes;
}

Status TopK(const float* x, int64_t ldx, int num_rows, int n, int k, int32_t* ids, float* values,
            cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckRows("TopK", x, ldx, num_rows, n));
  if (num_rows > 0 && (k < 1 || k > n || k > 1024 || ids == nullptr || values == nullptr)) {
    return Err(StatusCode::kInvalidArgument, "TopK: k {} outside [1, min(n = {}, 1024)] or null "
               "outputs", k, n);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchTopK(x, ldx, num_rows, n, k, ids, values, stream));
  return Status::Ok();
}

}  // namespace tandem::cuda
