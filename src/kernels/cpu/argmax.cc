#include "kernels/cpu/argmax.h"

// GCC 12's AVX-512 headers: see gemv_avx512.cc.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/matmul.h"

#define TANDEM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define TANDEM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace tandem::cpu {
namespace {

int64_t ArgMaxScalar(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

// Two passes: the maximum (and whether a NaN is present), then the first index holding it.
TANDEM_AVX512 int64_t ArgMaxAvx512(const float* x, int64_t n) {
  __m512 mx = _mm512_set1_ps(x[0]);
  __mmask16 nan = 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    mx = _mm512_max_ps(mx, v);
  }
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_mask_loadu_ps(mx, tail, x + i);  // lanes past n keep mx
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    mx = _mm512_max_ps(mx, v);
  }
  if (nan != 0) return ArgMaxScalar(x, n);
  const float mval = _mm512_reduce_max_ps(mx);
  const __m512 m = _mm512_set1_ps(mval);
  for (i = 0; i + 16 <= n; i += 16) {
    const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), m, _CMP_EQ_OQ);
    if (eq != 0) return i + __builtin_ctz(eq);
  }
  for (; i < n; ++i) {
    if (x[i] == mval) return i;
  }
  return ArgMaxScalar(x, n);  // not reached
}

TANDEM_AVX2 int64_t ArgMaxAvx2(const float* x, int64_t n) {
  __m256 mx = _mm256_set1_ps(x[0]);
  __m256 nan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    mx = _mm256_max_ps(mx, v);
  }
  if (_mm256_movemask_ps(nan) != 0) return ArgMaxScalar(x, n);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mx);
  float m = lanes[0];
  for (int l = 1; l < 8; ++l) m = std::max(m, lanes[l]);
  for (int64_t j = i; j < n; ++j) {
    if (x[j] != x[j]) return ArgMaxScalar(x, n);
    m = std::max(m, x[j]);
  }
  const __m256 mv = _mm256_set1_ps(m);
  for (i = 0; i + 8 <= n; i += 8) {
    const int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), mv, _CMP_EQ_OQ));
    if (eq != 0) return i + __builtin_ctz(static_cast<unsigned>(eq));
  }
  for (; i < n; ++i) {
    if (x[i] == m) return i;
  }
  return ArgMaxScalar(x, n);  // not reached
}

}  // namespace

int64_t ArgMax(const float* x, int64_t n) {
  switch (ActiveLinearIsa()) {
    case LinearIsa::kAvx512: return ArgMaxAvx512(x, n);
    case LinearIsa::kAvx2: return ArgMaxAvx2(x, n);
    default: return ArgMaxScalar(x, n);
  }
}

}  // namespace tandem::cpu
