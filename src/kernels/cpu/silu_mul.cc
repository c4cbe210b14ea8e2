#include "kernels/cpu/silu_mul.h"

#include <cmath>

namespace tandem::cpu {

void SiluMul(const float* gate, const float* up, long n, float* out) {
  for (long i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = (g / (1.0f + std::exp(-g))) * up[i];
  }
}

}  // namespace tandem::cpu
