// Linear layer as torch.nn.functional.linear: y = x W^T (+ b), fp32 through OpenBLAS sgemm.
#pragma once

namespace tandem::cpu {

// x: [m, k] (row stride k), w: [n, k] (HF [out, in]), bias: [n] or nullptr, y: [m, n].
void Linear(const float* x, int m, int k, const float* w, int n, const float* bias, float* y);

}  // namespace tandem::cpu
