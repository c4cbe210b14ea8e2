#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/silu_mul.h"

namespace tandem::cuda::detail {
namespace {

// grid: (num_tokens, chunks of the row). kVec: 8 elements (16 bytes) per thread.
template <bool kVec>
__global__ void SiluMulKernel(SiluMulArgs a) {
  // A GEMV launched programmatically after this kernel (LinearArgs::programmatic_launch) may
  // start fetching its weights now; it reads this kernel's output only after its wait.
  TriggerDependents();
  const int64_t t = blockIdx.x;
  const __nv_bfloat16* g = a.gate + t * a.gate_stride;
  const __nv_bfloat16* u = a.up + t * a.up_stride;
  __nv_bfloat16* o = a.out + t * a.out_stride;
  const int i = blockIdx.y * blockDim.x + threadIdx.x;
  if constexpr (kVec) {
    if (i >= a.dim / 8) return;
    float gv[8], uv[8];
    Bf16x8ToFloat(reinterpret_cast<const uint4*>(g)[i], gv);
    Bf16x8ToFloat(reinterpret_cast<const uint4*>(u)[i], uv);
#pragma unroll
    for (int j = 0; j < 8; ++j) gv[j] = SiluTimes(gv[j], uv[j]);
    reinterpret_cast<uint4*>(o)[i] = FloatToBf16x8(gv);
  } else {
    if (i >= a.dim) return;
    o[i] = __float2bfloat16_rn(SiluTimes(__bfloat162float(g[i]), __bfloat162float(u[i])));
  }
}

}  // namespace

cudaError_t LaunchSiluMul(const SiluMulArgs& a, cudaStream_t stream) {
  if (a.num_tokens == 0 || a.dim == 0) return cudaSuccess;
  const bool vec = a.dim % 8 == 0 && a.gate_stride % 8 == 0 && a.up_stride % 8 == 0 &&
                   a.out_stride % 8 == 0 && Aligned16(a.gate) && Aligned16(a.up) &&
                   Aligned16(a.out);
  constexpr int kThreads = 256;
  const int work = vec ? a.dim / 8 : a.dim;
  const dim3 grid(a.num_tokens, (work + kThreads - 1) / kThreads);
  if (vec) {
    TANDEM_LAUNCH(SiluMulKernel<true>, grid, kThreads, 0, stream, a);
  } else {
    TANDEM_LAUNCH(SiluMulKernel<false>, grid, kThreads, 0, stream, a);
  }
  return cudaGetLastError();
}

}  // namespace tandem::cuda::detail
