// Causal attention of a tile of up to 16 query rows against contiguous fp32 keys and values, with
// AVX-512 (internal to kernels/cpu: PagedAttention's prefill path, issue 29).
//
// The arithmetic of PagedAttention's sgemm path up to the order of the sums: each score is one fp32
// FMA chain over head_dim in index order, times `scale`; the softmax is SoftmaxRow's (max, subtract,
// cpu::Exp, a sum in key order, one reciprocal, a product); each output one FMA chain over the keys
// in order. (OpenBLAS's sgemm kernels sum in orders of their own, so the two paths differ in the
// last bits.)
#pragma once

namespace tandem::cpu {

// Whether the CPU runs AttentionTileAvx512 and it takes this head_dim (a multiple of 64, <= 256).
bool AttentionTileSupported(int head_dim);

// Query row r (0 <= r < rows <= 16; q + r * q_stride) attends to keys [0, first_valid + r), with
// first_valid >= 1: keys / values [first_valid + rows - 1, head_dim] contiguous. Writes
// out + r * out_stride, head_dim floats.
void AttentionTileAvx512(const float* q, long q_stride, int rows, const float* keys, const float* values,
                         int head_dim, int first_valid, float scale, float* out, long out_stride);

}  // namespace tandem::cpu
