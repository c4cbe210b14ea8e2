// RMSNorm on the GPU, bf16 storage, fp32 math (the CUDA twin of kernels/cpu/rms_norm.h), with the
// bf16 roundings of HF Qwen3RMSNorm/LlamaRMSNorm on bf16 tensors:
//   y = bf16( w * bf16( x * rsqrt(mean(x^2) + eps) ) )
//
// FusedAddRmsNorm is vLLM's fused_add_rms_norm, the residual add of a decoder layer followed by the
// next norm, in one pass:
//   residual = bf16(x + residual);  y = RmsNorm(residual)      (mean(x^2) over the rounded sum)
//
// Rows are strided (elements between row starts, >= dim) so a norm can read a slice of a wider
// buffer. All pointers are device pointers; asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

struct RmsNormArgs {
  const __nv_bfloat16* x = nullptr;  // [num_rows, dim], row stride x_stride
  int64_t x_stride = 0;
  __nv_bfloat16* residual = nullptr;  // fused only: [num_rows, dim] in/out, row stride res_stride
  int64_t res_stride = 0;
  const __nv_bfloat16* weight = nullptr;  // [dim]
  __nv_bfloat16* y = nullptr;             // [num_rows, dim], row stride y_stride; may alias x
  int64_t y_stride = 0;
  int num_rows = 0;
  int dim = 0;
  float eps = 1e-6f;
};

namespace detail {
cudaError_t LaunchRmsNorm(const RmsNormArgs& args, bool fused, cudaStream_t stream);
}  // namespace detail
}  // namespace tandem::cuda

#ifndef __CUDACC__
#include "common/status.h"

namespace tandem::cuda {

// y = RmsNorm(x). Errors: InvalidArgument (sizes, strides < dim, null pointers), Internal (CUDA).
Status RmsNorm(const RmsNormArgs& args, cudaStream_t stream);
// residual = x + residual; y = RmsNorm(residual). Same errors; residual must not alias x or y.
Status FusedAddRmsNorm(const RmsNormArgs& args, cudaStream_t stream);

}  // namespace tandem::cuda
#endif
