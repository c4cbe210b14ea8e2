#include "kernels/cpu/silu_mul.h"

#include <cmath>
#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vexp.h"

namespace tandem::cpu {

void SiluMul(const float* gate, const float* up, long n, float* out) {
  // Ranges on the CPU pool (each element's arithmetic unchanged).
  // exp(-g) through cpu::Exp (std::exp's values, vectorized), the rest elementwise as before.
  ParallelForRange(n, 8192, [&](int64_t begin, int64_t end) {
    constexpr int64_t kChunk = 256;
    float e[kChunk];
    for (int64_t c = begin; c < end; c += kChunk) {
      const int64_t len = end - c < kChunk ? end - c : kChunk;
      for (int64_t i = 0; i < len; ++i) e[i] = -gate[c + i];
      Exp(e, len, e);
      for (int64_t i = 0; i < len; ++i) {
        const float g = gate[c + i];
        out[c + i] = (g / (1.0f + e[i])) * up[c + i];
      }
    }
  });
}

}  // namespace tandem::cpu
