#include "kernels/cuda/linear.h"

#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/gemm_tune.h"
#include "kernels/cuda/gemv.h"

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
    tuner_ = other.tuner_;
    other.handle_ = nullptr;
    other.tuner_ = nullptr;
  }
  return *this;
}

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

namespace {

Status CheckArgs(const LinearArgs& a) {
  if (a.m < 0 || a.n < 0 || a.k < 0) {
    return Err(StatusCode::kInvalidArgument, "Linear: m {}, n {}, k {}", a.m, a.n, a.k);
  }
  if (a.m == 0 || a.n == 0) return Status::Ok();
  if (a.x == nullptr || a.w == nullptr || a.y == nullptr) {
    return Err(StatusCode::kInvalidArgument, "Linear: null pointer");
  }
  if (a.ldx < a.k || a.ldy < a.n) {
    return Err(StatusCode::kInvalidArgument, "Linear: row strides (x {}, y {}) below k {} / n {}",
               a.ldx, a.ldy, a.k, a.n);
  }
  return Status::Ok();
}

int NumSms() { return CurrentDeviceLimits().sm_count; }

}  // namespace

int GemvMaxM() {
  static const int max_m = [] {
    const char* on = std::getenv("TANDEM_GEMV");
    if (on != nullptr && std::strcmp(on, "0") == 0) return 0;
    const char* v = std::getenv("TANDEM_GEMV_MAX_M");
    if (v == nullptr || *v == '\0') return kGemvDefaultMaxM;
    const int n = std::atoi(v);
    return n < 0 ? 0 : (n > kGemvMaxRows ? kGemvMaxRows : n);
  }();
  return max_m;
}

bool GemvProgrammaticLaunch() {
  static const bool on = [] {
    const char* v = std::getenv("TANDEM_GEMV_PDL");
    if (v != nullptr && std::strcmp(v, "0") == 0) return false;
    return CurrentDeviceLimits().cc_major >= 9;
  }();
  return on;
}

int LinearGemvAutoSplit(const LinearArgs& a) { return detail::GemvAutoSplit(a.n, a.k, NumSms()); }

Status LinearGemv(const LinearArgs& a, int k_split, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckArgs(a));
  if (a.m == 0 || a.n == 0) return Status::Ok();
  if (!detail::GemvSupported(a)) {
    return Err(StatusCode::kInvalidArgument,
               "LinearGemv: unsupported m {} (<= {}), k {} / ldx {} (multiples of 8) or alignment",
               a.m, kGemvMaxRows, a.k, a.ldx);
  }
  if (k_split == 0) k_split = LinearGemvAutoSplit(a);
  if (k_split != 1 && k_split != 2 && k_split != 4 && k_split != 8) {
    return Err(StatusCode::kInvalidArgument, "LinearGemv: k_split {} (0, 1, 2, 4 or 8)", k_split);
  }
  LinearArgs b = a;
  b.programmatic_launch = a.programmatic_launch && GemvProgrammaticLaunch();
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchGemv(b, k_split, stream));
  return Status::Ok();
}

Status LinearCublas(const CublasHandle& handle, const LinearArgs& a, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckArgs(a));
  if (a.m == 0 || a.n == 0) return Status::Ok();
  if (handle.get() == nullptr) return Err(StatusCode::kInvalidArgument, "Linear: null cuBLAS handle");
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

Status Linear(const CublasHandle& handle, const LinearArgs& a, cudaStream_t stream) {
  if (a.m >= 1 && a.m <= GemvMaxM() && a.n >= 1 && detail::GemvSupported(a)) {
    return LinearGemv(a, 0, stream);
  }
  if (handle.tuner() != nullptr) {
    TANDEM_RETURN_IF_ERROR(CheckArgs(a));
    TANDEM_ASSIGN_OR_RETURN(const bool ran, handle.tuner()->Run(a, stream));
    if (ran) {
      TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchAddBias(a, stream));
      return Status::Ok();
    }
  }
  return LinearCublas(handle, a, stream);
}

}  // namespace tandem::cuda
