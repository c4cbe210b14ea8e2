#include "kernels/cpu/matmul.h"

#include <cblas.h>

namespace tandem::cpu {

void Linear(const float* x, int m, int k, const float* w, int n, const float* bias, float* y) {
  if (m == 0 || n == 0) return;
  if (m == 1) {
    // One row (batch-1 decode): OpenBLAS's sgemv streams W once; its sgemm at m = 1 took 16 of a
    // 19 ms step on the tiny model's 151,936 x 256 lm_head (issue 29).
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, w, k, x, 1, 0.0f, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x, k, w, k, 0.0f, y, n);
  }
  if (bias != nullptr) {
    for (int i = 0; i < m; ++i) {
      float* yr = y + static_cast<long>(i) * n;
      for (int j = 0; j < n; ++j) yr[j] += bias[j];
    }
  }
}

void SetLinearThreads(int n) { openblas_set_num_threads(n < 1 ? 1 : n); }

int LinearThreads() { return openblas_get_num_threads(); }

}  // namespace tandem::cpu
