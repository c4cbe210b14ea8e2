// Linear layer as torch.nn.functional.linear: y = x W^T (+ b), fp32 through OpenBLAS (sgemv for
// one row, sgemm otherwise).
#pragma once

namespace tandem::cpu {

// x: [m, k] (row stride k), w: [n, k] (HF [out, in]), bias: [n] or nullptr, y: [m, n].
void Linear(const float* x, int m, int k, const float* w, int n, const float* bias, float* y);

// Threads of the GEMMs behind Linear (OpenBLAS's pool, process-wide: openblas_set_num_threads);
// n >= 1. OpenBLAS otherwise takes every online CPU (OPENBLAS_NUM_THREADS aside), blind to cgroup
// CPU quotas: the CPU engine sets it from --threads or common/cpu_cores.h's UsableCores().
void SetLinearThreads(int n);
int LinearThreads();

}  // namespace tandem::cpu
