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

namespace detail {

// k slices per 16-row tile of W (1, 2, 4 or 8 warps of a 256-thread CTA), for `num_sms` SMs:
// doubled while the grid has fewer warps than ~24 per SM and each slice keeps >= 256 of k.
int GemvAutoSplit(int n, int k, int num_sms);

// True when the kernel handles `a` (see the requirements above).
bool GemvSupported(const LinearArgs& a);

// Launches the kernel (k_split in {1, 2, 4, 8}); a must satisfy GemvSupported, m, n >= 1.
cudaError_t LaunchGemv(const LinearArgs& a, int k_split, cudaStream_t stream);

}  // namespace detail
}  // namespace tandem::cuda
