// Device-side random fills for cuda_op_check (no fmt here: nvcc cannot compile it).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/device_utils.cuh"

namespace tandem::opcheck {
namespace {

__device__ inline uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <typename T>
__global__ void FillKernel(T* p, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint64_t r = SplitMix(seed * 0x2545f4914f6cdd1dull + i);
    const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    const float v = lo + (hi - lo) * u;
    if constexpr (sizeof(T) == 2) {
      p[i] = __float2bfloat16_rn(v);
    } else {
      p[i] = v;
    }
  }
}

template <typename T>
void Fill(T* p, size_t n, uint64_t seed, float lo, float hi) {
  if (n == 0) return;
#ifdef TANDEM_CUDA_EMU
  constexpr int kBlocks = 1;  // emulated threads are expensive; the loop is grid-stride
#else
  constexpr int kBlocks = 1024;
#endif
  TANDEM_LAUNCH(FillKernel<T>, kBlocks, 256, 0, nullptr, p, n, seed, lo, hi);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::fprintf(stderr, "FATAL FillUniform: %s\n", cudaGetErrorString(e));
    std::exit(2);
  }
}

}  // namespace

void FillUniform(__nv_bfloat16* p, size_t n, uint64_t seed, float lo, float hi) {
  Fill(p, n, seed, lo, hi);
}
void FillUniform(float* p, size_t n, uint64_t seed, float lo, float hi) { Fill(p, n, seed, lo, hi); }

}  // namespace tandem::opcheck
