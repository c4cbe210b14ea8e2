// The GEMM kernels behind cpu::Linear (matmul.h), one set per ISA (issue 29): the SIMD ones for any m,
// the portable one for m <= kGemvMaxRows. Internal to kernels/cpu: matmul.cc picks a set by the CPU's
// features and splits the rows of W across the thread pool.
//
// Each kernel streams the weight once for all m rows of x: every element of W is converted exactly
// to fp32 (bf16: shifted by 16; f16: the IEEE conversion) and multiplied into the rows with fp32 FMAs
// (no bf16 dot-product instructions: they would round x to bf16). The per-row sums are in fp32 in
// an order of the kernel's own (lanes, then a horizontal sum), so results differ from OpenBLAS's
// in the last bits only.
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/weight_matrix.h"

namespace tandem::cpu {

inline constexpr int kGemvMaxRows = 16;

// y[i * ldy + j] = sum_c x[i * k + c] * W[j][c] (+ bias[j] when bias) for i in [0, m), j in
// [row_begin, row_end); k = w.cols; m >= 1 (the portable kernel: m <= kGemvMaxRows).
using GemvFn = void (*)(const float* x, int m, const WeightMatrix& w, int64_t row_begin, int64_t row_end,
                        const float* bias, float* y, int64_t ldy);
// WeightRowsToFloat's contract (weight_matrix.h).
using ConvertFn = void (*)(const WeightMatrix& w, int64_t row_begin, int64_t num_rows, float* out);

struct GemvKernels {
  LinearIsa isa = LinearIsa::kScalar;
  GemvFn gemv = nullptr;
  ConvertFn convert = nullptr;
};

GemvKernels ScalarGemvKernels();
// Only call these where the CPU has the features (LinearIsaSupported in matmul.h): AVX2 + FMA + F16C;
// AVX-512 F + BW + VL.
GemvKernels Avx2GemvKernels();
GemvKernels Avx512GemvKernels();

}  // namespace tandem::cpu
