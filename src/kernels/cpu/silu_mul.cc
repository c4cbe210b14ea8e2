#include "kernels/cpu/silu_mul.h"

// GCC 12's AVX-512 headers: see gemv_avx512.cc.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TANDEM_HAVE_X86 1
#endif

#include <cmath>
#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vexp.h"

namespace tandem::cpu {
namespace {

// out[i] = (g[i] / (1 + e[i])) * up[i]: the same IEEE operations per element in every version.
void FinishScalar(const float* g, const float* e, const float* up, long n, float* out) {
  for (long i = 0; i < n; ++i) out[i] = (g[i] / (1.0f + e[i])) * up[i];
}

#ifdef TANDEM_HAVE_X86
__attribute__((target("avx512f"))) void FinishAvx512(const float* g, const float* e, const float* up, long n,
                                                     float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  long i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 q = _mm512_div_ps(_mm512_loadu_ps(g + i), _mm512_add_ps(one, _mm512_loadu_ps(e + i)));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(q, _mm512_loadu_ps(up + i)));
  }
  FinishScalar(g + i, e + i, up + i, n - i, out + i);
}
#endif

}  // namespace

void SiluMulSerial(const float* gate, const float* up, long n, float* out) {
  // exp(-g) through cpu::Exp (std::exp's values, vectorized), the rest elementwise.
#ifdef TANDEM_HAVE_X86
  const bool avx512 = ActiveLinearIsa() == LinearIsa::kAvx512;
#else
  const bool avx512 = false;
#endif
  constexpr long kChunk = 256;
  float e[kChunk];
  for (long c = 0; c < n; c += kChunk) {
    const long len = n - c < kChunk ? n - c : kChunk;
    for (long i = 0; i < len; ++i) e[i] = -gate[c + i];
    Exp(e, len, e);
#ifdef TANDEM_HAVE_X86
    if (avx512) {
      FinishAvx512(gate + c, e, up + c, len, out + c);
      continue;
    }
#endif
    FinishScalar(gate + c, e, up + c, len, out + c);
  }
  (void)avx512;
}

void SiluMul(const float* gate, const float* up, long n, float* out) {
  // Ranges on the CPU pool (each element's arithmetic unchanged).
  ParallelForRange(n, 8192, [&](int64_t begin, int64_t end) {
    SiluMulSerial(gate + begin, up + begin, static_cast<long>(end - begin), out + begin);
  });
}

}  // namespace tandem::cpu
