#include "kernels/cpu/rms_norm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/thread_pool.h"

namespace tandem::cpu {

namespace {

void Rows(const float* x, const float* w, int64_t row_begin, int64_t row_end, int dim, float eps, float* y) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* xr = x + static_cast<long>(r) * dim;
    float* yr = y + static_cast<long>(r) * dim;
    double sum_sq = 0.0;
    for (int i = 0; i < dim; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
    const float variance = static_cast<float>(sum_sq / dim);
    const float inv_rms = static_cast<float>(1.0 / std::sqrt(static_cast<double>(variance + eps)));
    for (int i = 0; i < dim; ++i) yr[i] = w[i] * (xr[i] * inv_rms);
  }
}

}  // namespace

void RmsNorm(const float* x, const float* w, int num_rows, int dim, float eps, float* y) {
  // Rows on the CPU pool (each row's arithmetic unchanged): about 16k elements a task.
  ParallelForRange(num_rows, std::max(1, 16384 / std::max(dim, 1)),
                   [&](int64_t begin, int64_t end) { Rows(x, w, begin, end, dim, eps, y); });
}

}  // namespace tandem::cpu
