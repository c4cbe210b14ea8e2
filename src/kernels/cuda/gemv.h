// Skinny GEMM for decode ("GEMV", m <= 16 rows of x): y = x W^T (+ bias) with the LinearArgs of
// linear.h (x [m, k] bf16 row stride ldx, W [n, k] bf16 row-major = HF [out, in], y [m, n] bf16 or
// fp32 row stride ldy). A memory-bound kernel that reads W once for all m rows; cuda::Linear
// (linear.cc) dispatches to it for m <= GemvMaxM() and to cuBLAS otherwise.
//
// Numerics: bf16 products summed in fp32 by mma.sync (as cuBLAS's tensor-core GEMM), k split into
// a fixed number of slices (k_split, a function of n, k and the SM count only, never of m) summed
// in a fixed order: deterministic, and row i of y does not depend on m or on the other rows of x.
// The bias is added in fp32 before the single rounding to bf16 (cuBLAS + LaunchAddBias rounds twice).
//
// Requirements (GemvSupported; otherwise cuda::Linear uses cuBLAS): 1 <= m <= 16, k % 8 == 0,
// ldx % 8 == 0, x and W 16-byte aligned (one 16-byte load = 8 bf16); y and bias any alignment.
// Approach: the A operand of mma.m16n8k16 is 16 rows of W and B is the 8 (or 16) rows of x, each
// lane loading 16 contiguous bytes of W and of x at the same k (a k permutation applied to both,
// see gemv.cu); split-K inside a CTA reduced through shared memory; in the spirit of the
// weight-streaming GEMV kernels of TensorRT-LLM / FasterTransformer and calm's matmul.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/linear.h"

namespace tandem::cuda {

constexpr int kGemvMaxRows = 16;    // the kernel's limit on m
constexpr int kGemvDefaultMaxM = 8;  // cuda::Linear's default threshold (TANDEM_GEMV_MAX_M)

// Work of a decoder layer's small kernels done inside the GEMV (m <= kGemvFusedMaxRows, bf16 out),
// each bitwise equal to the separate kernel it replaces, so a decode step gives the same tokens
// with or without it and launches three kernels fewer per layer:
// - norm_weight: x is RMS-normalized on the fly, x'[r, i] = bf16(w[i] * bf16(x[r, i] * inv_rms[r])),
//   with inv_rms[r] = 1 / sqrt(mean(x[r]^2) + norm_eps) summed in RmsNorm's order (rms_norm.cu,
//   RmsNormThreads) and each CTA reducing the m rows itself (k <= 8192: one 16-byte load per
//   thread of RmsNorm's block). Replaces the RmsNorm before qkv / gate_up.
// - up: x is the gate and x'[r, i] = bf16(silu(x[r, i]) * up[r, i]), up [m, k] with x's row stride
//   (SiluMul, silu_mul.h). Replaces the SiLU*mul before down.
// - accumulate: y = bf16(bf16(x W^T + bias) + y), the residual add of FusedAddRmsNorm after o_proj
//   / down (y must not overlap x or up: each y element is read and written by the one thread that
//   computes it).
// norm_weight and up exclude each other; x, up and norm_weight 16-byte aligned.
struct GemvFusion {
  const __nv_bfloat16* norm_weight = nullptr;  // [k], or null
  float norm_eps = 1e-6f;
  const __nv_bfloat16* up = nullptr;  // [m, k], row stride LinearArgs::ldx, or null
  bool accumulate = false;
};

constexpr int kGemvFusedMaxRows = 8;
constexpr int kGemvFusedNormMaxK = 8192;

namespace detail {

// k slices per 16-row tile of W (1, 2, 4 or 8 warps of a 256-thread CTA), for `num_sms` SMs:
// doubled while the grid has fewer warps than ~24 per SM and each slice keeps >= 256 of k.
int GemvAutoSplit(int n, int k, int num_sms);

// True when the kernel handles `a` (see the requirements above).
bool GemvSupported(const LinearArgs& a);

// Launches the kernel (k_split in {1, 2, 4, 8}); a must satisfy GemvSupported, m, n >= 1.
cudaError_t LaunchGemv(const LinearArgs& a, int k_split, cudaStream_t stream);

// True when the kernel handles `a` with `f` (GemvSupported, m <= kGemvFusedMaxRows, bf16 out, the
// requirements of GemvFusion above).
bool GemvFusionSupported(const LinearArgs& a, const GemvFusion& f);

// Launches the fused kernel; a and f must satisfy GemvFusionSupported, k_split in {1, 2, 4, 8}.
cudaError_t LaunchGemvFused(const LinearArgs& a, const GemvFusion& f, int k_split, cudaStream_t stream);

}  // namespace detail
}  // namespace tandem::cuda

#ifndef __CUDACC__
#include "common/status.h"

namespace tandem::cuda {

// Largest m for which the CUDA runner fuses its small kernels into the GEMV (GemvFusion):
// min(GemvMaxM(), kGemvFusedMaxRows), or TANDEM_GEMV_FUSE_MAX_M below that; 0 with TANDEM_GEMV_FUSE=0.
int GemvFuseMaxM();

// Whether LinearGemvFused takes (a, f): 1 <= a.m <= GemvFuseMaxM() and the kernel's requirements.
bool GemvFusable(const LinearArgs& a, const GemvFusion& f);

// y = x W^T (+ bias) with the fusions of f (k_split 0 = automatic, as LinearGemv). Errors:
// InvalidArgument (sizes, or (a, f) outside GemvFusionSupported), Internal (CUDA).
Status LinearGemvFused(const LinearArgs& a, const GemvFusion& f, int k_split, cudaStream_t stream);

}  // namespace tandem::cuda
#endif
