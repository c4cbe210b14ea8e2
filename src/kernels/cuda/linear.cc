#include "kernels/cuda/linear.h"

#include "kernels/cuda/cuda_check.h"

namespace tandem::cuda {

Result<CublasHandle> CublasHandle::Create() {
  cublasHandle_t h = nullptr;
  TANDEM_CUBLAS_RETURN_IF_ERROR(cublasCreate(&h));
  return CublasHandle(h);
}

CublasHandle& CublasHandle::operator=(CublasHandle&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) cublasDestroy(handle_);
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

Status Linear(const CublasHandle& handle, const LinearArgs& a, cudaStream_t stream) {
  if (a.m < 0 || a.n < 0 || a.k < 0) {
    return Err(StatusCode::kInvalidArgument, "Linear: m {}, n {}, k {}", a.m, a.n, a.k);
  }
  if (a.m == 0 || a.n == 0) return Status::Ok();
  if (a.x == nullptr || a.w == nullptr || a.y == nullptr || handle.get() == nullptr) {
    return Err(StatusCode::kInvalidArgument, "Linear: null pointer or handle");
  }
  if (a.ldx < a.k || a.ldy < a.n) {
    return Err(StatusCode::kInvalidArgument, "Linear: row strides (x {}, y {}) below k {} / n {}",
               a.ldx, a.ldy, a.k, a.n);
  }
  // cublasSetStream also drops a workspace set by cublasSetWorkspace (which CUDA graph capture
  // needs), so the stream is set only when it changes.
  cudaStream_t current = nullptr;
  if (cublasGetStream(handle.get(), &current) != CUBLAS_STATUS_SUCCESS || current != stream) {
    TANDEM_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle.get(), stream));
  }
  // cuBLAS is column-major: row-major y[m, n] is column-major y^T [n, m] = W x^T, where W
  // (row-major [n, k]) reads as a column-major [k, n] matrix, hence op T, and x as [k, m], op N.
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t y_type = a.out_dtype == OutDtype::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  TANDEM_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
      handle.get(), CUBLAS_OP_T, CUBLAS_OP_N, a.n, a.m, a.k, &alpha, a.w, CUDA_R_16BF, a.k, a.x,
      CUDA_R_16BF, static_cast<int>(a.ldx), &beta, a.y, y_type, static_cast<int>(a.ldy),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchAddBias(a, stream));
  return Status::Ok();
}

}  // namespace tandem::cuda
