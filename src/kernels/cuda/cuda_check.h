// CUDA and cuBLAS error handling for the CUDA ops: every runtime call and every launch is checked,
// and a failure becomes a tandem Status (kInternal, "<file>:<line>: <call>: <cuda error text>").
//
//   TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(...));   // in a function returning Status
//   my_kernel<<<grid, block, 0, stream>>>(...);
//   TANDEM_CUDA_RETURN_IF_ERROR(cudaGetLastError());      // after each launch
//   TANDEM_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(...));
//
// A launch error (bad configuration) is reported right away; an error raised while the kernel runs
// (an illegal address) is sticky and surfaces at the next synchronizing call on the device.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "common/status.h"

namespace tandem::cuda {

// Defined in cuda_check.cc. nvcc 13.0 cannot compile fmt 9's headers, so this header (and
// common/status.h) is for host .cc files only: .cu files return cudaError_t from detail::Launch*
// functions and the op's .cc turns that into a Status.
Status CudaStatus(cudaError_t err, const char* expr, const char* file, int line);
Status CublasStatus(cublasStatus_t err, const char* expr, const char* file, int line);

}  // namespace tandem::cuda

#define TANDEM_CUDA_RETURN_IF_ERROR(expr) \
  TANDEM_RETURN_IF_ERROR(::tandem::cuda::CudaStatus((expr), #expr, __FILE__, __LINE__))

#define TANDEM_CUBLAS_RETURN_IF_ERROR(expr) \
  TANDEM_RETURN_IF_ERROR(::tandem::cuda::CublasStatus((expr), #expr, __FILE__, __LINE__))

// Checks the launch just made (configuration errors, no kernel image for this device).
#define TANDEM_CUDA_CHECK_LAUNCH() TANDEM_CUDA_RETURN_IF_ERROR(cudaGetLastError())
