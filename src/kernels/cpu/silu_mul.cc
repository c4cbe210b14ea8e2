#include "kernels/cpu/silu_mul.h"

#include <cmath>
#include <cstdint>

#include "kernels/cpu/thread_pool.h"

namespace tandem::cpu {

void SiluMul(const float* gate, const float* up, long n, float* out) {
  // Ranges on the CPU pool (each element's arithmetic unchanged).
  ParallelForRange(n, 8192, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float g = gate[i];
      out[i] = (g / (1.0f + std::exp(-g))) * up[i];
    }
  });
}

}  // namespace tandem::cpu
