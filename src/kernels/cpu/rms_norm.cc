#include "kernels/cpu/rms_norm.h"

#include <cmath>

namespace tandem::cpu {

void RmsNorm(const float* x, const float* w, int num_rows, int dim, float eps, float* y) {
  for (int r = 0; r < num_rows; ++r) {
    const float* xr = x + static_cast<long>(r) * dim;
    float* yr = y + static_cast<long>(r) * dim;
    double sum_sq = 0.0;
    for (int i = 0; i < dim; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
    const float variance = static_cast<float>(sum_sq / dim);
    const float inv_rms = static_cast<float>(1.0 / std::sqrt(static_cast<double>(variance + eps)));
    for (int i = 0; i < dim; ++i) yr[i] = w[i] * (xr[i] * inv_rms);
  }
}

}  // namespace tandem::cpu
