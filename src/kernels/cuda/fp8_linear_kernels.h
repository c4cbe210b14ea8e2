// The kernels behind cuda::Fp8Linear (fp8_linear.h), as plain launches returning cudaError_t (the
// .cu side; arguments are checked by fp8_linear.cc). Shapes and scale layouts: fp8_linear.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/silu_mul.h"

namespace tandem::cuda::detail {

struct Fp8GemvParams {
  const __nv_bfloat16* x;  // [m, k], row stride ldx
  int64_t ldx;
  const uint8_t* w;        // [n, k] e4m3
  const float* scale;      // per channel [n], or 128 x 128 blocks [ceil(n/128), Fp8BlockScaleCols(k)]
  bool block;
  const __nv_bfloat16* bias;  // [n] or null
  void* y;                 // [m, n], row stride ldy
  int64_t ldy;
  int m, n, k;
  int k_split;  // 1, 2, 4 or 8
  bool pdl;
};

// m <= 16, k % 16 == 0, ldx % 8 == 0, x and w 16-byte aligned.
cudaError_t LaunchFp8Gemv(const Fp8GemvParams& p, bool f32_out, cudaStream_t stream);

// x [m, k] bf16 (row stride ldx) -> q [m, k] e4m3 (contiguous) and fp32 scales, q = x / scale
// rounded (saturating), scale = max(amax, 1e-12) / 448 over each group: per token (group = the
// row; scales [m]) when group == 0, else per group of 128 columns: scale of (row, group g) at
// g * scales_ld + row when scales_k_major, else at row * scales_ld + g. k % 8 == 0, ldx % 8 == 0,
// x 16-byte aligned.
cudaError_t LaunchQuantizeFp8Activations(const __nv_bfloat16* x, int64_t ldx, int m, int k, int group,
                                         bool scales_k_major, int64_t scales_ld, uint8_t* q,
                                         float* scales, cudaStream_t stream);

// LaunchQuantizeFp8Activations of v = bf16(silu(gate) * up) (silu_mul.h) without writing v: k =
// a.dim; a.out unused. a.dim % 8 == 0, strides % 8 == 0, gate and up 16-byte aligned.
cudaError_t LaunchSiluMulQuantizeFp8(const SiluMulArgs& a, int group, bool scales_k_major, int64_t scales_ld,
                                     uint8_t* q, float* scales, cudaStream_t stream);

// LaunchQuantizeFp8Activations of y = RmsNorm(x) (fused: of FusedAddRmsNorm, whose residual it
// writes; rms_norm.h) without writing y: k = a.dim; a.y unused; group-128 scales k-major (at
// g * scales_ld + row). a.dim % 8 == 0 and <= kRmsNormQuantizeMaxDim (fp8_linear.h; else
// cudaErrorInvalidValue), strides % 8 == 0, x, residual and weight 16-byte aligned.
cudaError_t LaunchRmsNormQuantizeFp8(const RmsNormArgs& a, bool fused, int group, int64_t scales_ld, uint8_t* q,
                                     float* scales, cudaStream_t stream);

// w [n, k] e4m3 with scales as Fp8GemvParams -> out [n, k] bf16 (code times scale, rounded once).
cudaError_t LaunchDequantizeFp8Weight(const uint8_t* w, const float* scale, bool block, int n, int k,
                                      __nv_bfloat16* out, cudaStream_t stream);

}  // namespace tandem::cuda::detail
