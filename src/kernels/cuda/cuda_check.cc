#include "kernels/cuda/cuda_check.h"

namespace tandem::cuda {

Status CudaStatus(cudaError_t err, const char* expr, const char* file, int line) {
  if (err == cudaSuccess) return Status::Ok();
  return Err(StatusCode::kInternal, "{}:{}: {}: {} ({})", file, line, expr,
             cudaGetErrorString(err), cudaGetErrorName(err));
}

Status CublasStatus(cublasStatus_t err, const char* expr, const char* file, int line) {
  if (err == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Err(StatusCode::kInternal, "{}:{}: {}: {} ({})", file, line, expr,
             cublasGetStatusString(err), static_cast<int>(err));
}

}  // namespace tandem::cuda
