#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/linear.h"

namespace tandem::cuda::detail {
namespace {

// grid: (m rows, column chunks of 256).
template <typename T>
__global__ void AddBiasKernel(T* y, int64_t ldy, const __nv_bfloat16* bias, int n) {
  const int j = blockIdx.y * blockDim.x + threadIdx.x;
  if (j >= n) return;
  T* row = y + static_cast<int64_t>(blockIdx.x) * ldy;
  if constexpr (sizeof(T) == 2) {
    row[j] = __float2bfloat16_rn(__bfloat162float(row[j]) + __bfloat162float(bias[j]));
  } else {
    row[j] += __bfloat162float(bias[j]);
  }
}

}  // namespace

cudaError_t LaunchAddBias(const LinearArgs& a, cudaStream_t stream) {
  if (a.bias == nullptr || a.m == 0 || a.n == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const dim3 grid(a.m, (a.n + kThreads - 1) / kThreads);
  if (a.out_dtype == OutDtype::kBf16) {
    TANDEM_LAUNCH(AddBiasKernel<__nv_bfloat16>, grid, kThreads, 0, stream, static_cast<__nv_bfloat16*>(a.y), a.ldy, a.bias, a.n);
  } else {
    TANDEM_LAUNCH(AddBiasKernel<float>, grid, kThreads, 0, stream, static_cast<float*>(a.y), a.ldy, a.bias, a.n);
  }
  return cudaGetLastError();
}

}  // namespace tandem::cuda::detail
