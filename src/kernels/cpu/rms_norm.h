// RMSNorm as in HF LlamaRMSNorm / Qwen3RMSNorm, fp32:
//   y = x * rsqrt(mean(x^2) + eps) * w
#pragma once

namespace tandem::cpu {

// x: [num_rows, dim], w: [dim], y: [num_rows, dim] (y may alias x).
void RmsNorm(const float* x, const float* w, int num_rows, int dim, float eps, float* y);
// The same on the calling thread (RmsNorm splits the rows across the CPU pool); the same values.
void RmsNormRows(const float* x, const float* w, int num_rows, int dim, float eps, float* y);

}  // namespace tandem::cpu
