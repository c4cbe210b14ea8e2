// SwiGLU activation on the GPU (the CUDA twin of kernels/cpu/silu_mul.h, vLLM's silu_and_mul):
//   out[t, i] = bf16( silu(gate[t, i]) * up[t, i] ),  silu(x) = x / (1 + e^-x), fp32 math.
// gate and up are usually the two halves of one fused gate_up projection [num_tokens, 2 * dim]
// (gate = buf, up = buf + dim, both with row stride 2 * dim). Device pointers; asynchronous.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

struct SiluMulArgs {
  const __nv_bfloat16* gate = nullptr;  // [num_tokens, dim], row stride gate_stride
  int64_t gate_stride = 0;
  const __nv_bfloat16* up = nullptr;    // [num_tokens, dim], row stride up_stride
  int64_t up_stride = 0;
  __nv_bfloat16* out = nullptr;         // [num_tokens, dim], row stride out_stride (may alias gate)
  int64_t out_stride = 0;
  int num_tokens = 0;
  int dim = 0;
};

namespace detail {
cudaError_t LaunchSiluMul(const SiluMulArgs& args, cudaStream_t stream);
}  // namespace detail
}  // namespace tandem::cuda

#ifndef __CUDACC__
#include "common/status.h"

namespace tandem::cuda {

// Errors: InvalidArgument (sizes, strides < dim, null pointers), Internal (CUDA).
Status SiluMul(const SiluMulArgs& args, cudaStream_t stream);

}  // namespace tandem::cuda
#endif
