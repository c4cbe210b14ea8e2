#include "kernels/cpu/rms_norm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/thread_pool.h"

namespace tandem::cpu {

namespace {

// y[r] = w * (x[r] * inv_rms(x[r])) for kRows rows at once: each row's sum of squares in double, in
// index order as one row alone would take it; the rows' sums are independent chains, so a few run
// side by side instead of one add latency per element.
template <int kRows>
void RowGroup(const float* x, const float* w, int dim, float eps, float* y) {
  double sum_sq[kRows] = {};
  for (int i = 0; i < dim; ++i) {
    for (int r = 0; r < kRows; ++r) {
      const double v = x[static_cast<long>(r) * dim + i];
      sum_sq[r] += v * v;  // exact product (24-bit mantissas), one rounding in the add
    }
  }
  for (int r = 0; r < kRows; ++r) {
    const float* xr = x + static_cast<long>(r) * dim;
    float* yr = y + static_cast<long>(r) * dim;
    const float variance = static_cast<float>(sum_sq[r] / dim);
    const float inv_rms = static_cast<float>(1.0 / std::sqrt(static_cast<double>(variance + eps)));
    for (int i = 0; i < dim; ++i) yr[i] = w[i] * (xr[i] * inv_rms);
  }
}

}  // namespace

void RmsNormRows(const float* x, const float* w, int num_rows, int dim, float eps, float* y) {
  constexpr int kGroup = 4;
  int r = 0;
  for (; r + kGroup <= num_rows; r += kGroup) {
    RowGroup<kGroup>(x + static_cast<long>(r) * dim, w, dim, eps, y + static_cast<long>(r) * dim);
  }
  for (; r < num_rows; ++r) RowGroup<1>(x + static_cast<long>(r) * dim, w, dim, eps, y + static_cast<long>(r) * dim);
}

void RmsNorm(const float* x, const float* w, int num_rows, int dim, float eps, float* y) {
  // Rows on the CPU pool (each row's arithmetic unchanged): about 16k elements a task.
  ParallelForRange(num_rows, std::max(1, 16384 / std::max(dim, 1)), [&](int64_t begin, int64_t end) {
    RmsNormRows(x + begin * dim, w, static_cast<int>(end - begin), dim, eps, y + begin * dim);
  });
}

}  // namespace tandem::cpu
