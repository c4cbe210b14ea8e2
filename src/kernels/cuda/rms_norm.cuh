// RMSNorm's row arithmetic on the device (included only by .cu files), shared by RmsNormKernel
// (rms_norm.cu) and the norm that writes FP8 codes instead of y (fp8_quant.cu), so that both get
// the same sum of squares bit for bit: the same threads (RmsNormThreads), the same elements per
// thread, the same block reduction. Rows of dim % 8 == 0 columns, 16-byte aligned (uint4 accesses).
// Formulas: rms_norm.h.
#pragma once

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/rms_norm.h"

namespace tandem::cuda::detail {

// Threads of the one CTA per row: one a `work` item (8 columns when vectorized), in whole warps,
// 64 to 1024.
__host__ __device__ inline int RmsNormThreads(int work) {
  int threads = ((work + 31) / 32) * 32;
  return threads < 64 ? 64 : (threads > 1024 ? 1024 : threads);
}

// Chunk c of row `row` in pass 1: z = x (kFused: bf16(x + residual), stored back into residual)
// as 8 floats, their squares added to *sum_sq in column order.
template <bool kFused>
__device__ inline void RmsNormChunk(const RmsNormArgs& a, int64_t row, int c, float z[8], float* sum_sq) {
  Bf16x8ToFloat(reinterpret_cast<const uint4*>(a.x + row * a.x_stride)[c], z);
  if constexpr (kFused) {
    __nv_bfloat16* res = a.residual + row * a.res_stride;
    float r[8];
    Bf16x8ToFloat(reinterpret_cast<const uint4*>(res)[c], r);
#pragma unroll
    for (int i = 0; i < 8; ++i) z[i] = RoundBf16(z[i] + r[i]);
    reinterpret_cast<uint4*>(res)[c] = FloatToBf16x8(z);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) *sum_sq += z[i] * z[i];
}

// 1 / rms from this thread's part of the sum of squares, reduced over the CTA.
__device__ inline float RmsNormInvRms(const RmsNormArgs& a, float sum_sq, float* scratch) {
  sum_sq = BlockSum(sum_sq, scratch);
  return 1.0f / sqrtf(sum_sq / static_cast<float>(a.dim) + a.eps);
}

// Pass 1 over row `row` (every thread of the CTA calls it): with kFused, residual = bf16(x +
// residual) stored back; the sum of squares of the normalized row's input z (x, or the new
// residual) reduced over the CTA; returns 1 / rms. scratch: 32 floats of shared memory.
template <bool kFused>
__device__ inline float RmsNormInvRmsVec(const RmsNormArgs& a, int64_t row, float* scratch) {
  float sum_sq = 0.0f;
  for (int c = threadIdx.x; c < a.dim / 8; c += blockDim.x) {
    float z[8];
    RmsNormChunk<kFused>(a, row, c, z, &sum_sq);
  }
  return RmsNormInvRms(a, sum_sq, scratch);
}

// Pass 1 where the CTA has a thread for every chunk (dim / 8 <= blockDim.x): the same sum, with
// thread c's 8 values of z kept in `z` (zeros past the row) for a pass 2 from registers.
template <bool kFused>
__device__ inline float RmsNormInvRmsKeep(const RmsNormArgs& a, int64_t row, float* scratch, float z[8]) {
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) z[i] = 0.0f;
  if (threadIdx.x < a.dim / 8) RmsNormChunk<kFused>(a, row, threadIdx.x, z, &sum_sq);
  return RmsNormInvRms(a, sum_sq, scratch);
}

// Pass 2 for the 8 columns of chunk c: y = w * bf16(z * inv_rms), as floats (each the caller rounds
// to bf16 once). The chunk is one this thread read in pass 1.
template <bool kFused>
__device__ inline void RmsNormEight(const RmsNormArgs& a, int64_t row, int c, float inv_rms, float y[8]) {
  const __nv_bfloat16* z = kFused ? a.residual + row * a.res_stride : a.x + row * a.x_stride;
  float w[8];
  Bf16x8ToFloat(reinterpret_cast<const uint4*>(z)[c], y);
  Bf16x8ToFloat(reinterpret_cast<const uint4*>(a.weight)[c], w);
#pragma unroll
  for (int i = 0; i < 8; ++i) y[i] = w[i] * RoundBf16(y[i] * inv_rms);
}

}  // namespace tandem::cuda::detail
