#include "kernels/cpu/vexp.h"

// GCC 12's AVX-512 headers: see gemv_avx512.cc.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/matmul.h"

#define TANDEM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define TANDEM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace tandem::cpu {
namespace {

// glibc's __exp2f_data: tab[i] = bits(2^(i/32)) - (i << 47), and the scaled constants.
alignas(64) constexpr uint64_t kTable[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540};
constexpr double kInvLn2N = 0x1.71547652b82fep+0 * 32;
constexpr double kShift = 0x1.8p+52;
constexpr double kC0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32;
constexpr double kC1 = 0x1.ebfce50fac4f3p-3 / 32 / 32;
constexpr double kC2 = 0x1.62e42ff0c52d6p-1 / 32;
// Where glibc computes through the table and polynomial (outside: 0, inf or NaN by special cases).
constexpr float kLow = -0x1.9fe368p6f;
constexpr float kHigh = 0x1.62e42ep6f;

void ExpScalar(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

TANDEM_AVX512 inline __m256 Exp8Avx512(__m256 xf, __m512i t0, __m512i t1, __m512i t2, __m512i t3) {
  const __m512d xd = _mm512_cvtps_pd(xf);
  const __m512d z = _mm512_mul_pd(_mm512_set1_pd(kInvLn2N), xd);
  __m512d kd = _mm512_add_pd(z, _mm512_set1_pd(kShift));
  const __m512i ki = _mm512_castpd_si512(kd);
  kd = _mm512_sub_pd(kd, _mm512_set1_pd(kShift));
  const __m512d r = _mm512_sub_pd(z, kd);
  const __m512i idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
  const __m512i lo = _mm512_permutex2var_epi64(t0, idx, t1);
  const __m512i hi = _mm512_permutex2var_epi64(t2, idx, t3);
  __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(idx, _mm512_set1_epi64(16)), lo, hi);
  t = _mm512_add_epi64(t, _mm512_slli_epi64(ki, 47));
  const __m512d s = _mm512_castsi512_pd(t);
  const __m512d zz = _mm512_fmadd_pd(_mm512_set1_pd(kC0), r, _mm512_set1_pd(kC1));
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(kC2), r, _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(zz, r2, y);
  return _mm512_cvtpd_ps(_mm512_mul_pd(y, s));
}

TANDEM_AVX512 void ExpAvx512(const float* x, int64_t n, float* y) {
  const __m512i t0 = _mm512_load_si512(kTable), t1 = _mm512_load_si512(kTable + 8);
  const __m512i t2 = _mm512_load_si512(kTable + 16), t3 = _mm512_load_si512(kTable + 24);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __mmask16 in = _mm512_cmp_ps_mask(v, _mm512_set1_ps(kLow), _CMP_GE_OQ) &
                         _mm512_cmp_ps_mask(v, _mm512_set1_ps(kHigh), _CMP_LE_OQ);
    if (in != 0xffff) {
      ExpScalar(x + i, 16, y + i);
      continue;
    }
    const __m256 a = Exp8Avx512(_mm512_castps512_ps256(v), t0, t1, t2, t3);
    const __m256 b = Exp8Avx512(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)), t0, t1, t2, t3);
    _mm512_storeu_ps(y + i, _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(a)),
                                                                 _mm256_castps_pd(b), 1)));
  }
  ExpScalar(x + i, n - i, y + i);
}

TANDEM_AVX2 inline __m128 Exp4Avx2(__m128 xf) {
  const __m256d xd = _mm256_cvtps_pd(xf);
  const __m256d z = _mm256_mul_pd(_mm256_set1_pd(kInvLn2N), xd);
  __m256d kd = _mm256_add_pd(z, _mm256_set1_pd(kShift));
  const __m256i ki = _mm256_castpd_si256(kd);
  kd = _mm256_sub_pd(kd, _mm256_set1_pd(kShift));
  const __m256d r = _mm256_sub_pd(z, kd);
  const __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
  __m256i t = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(kTable), idx, 8);
  t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 47));
  const __m256d s = _mm256_castsi256_pd(t);
  const __m256d zz = _mm256_fmadd_pd(_mm256_set1_pd(kC0), r, _mm256_set1_pd(kC1));
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(kC2), r, _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(zz, r2, y);
  return _mm256_cvtpd_ps(_mm256_mul_pd(y, s));
}

TANDEM_AVX2 void ExpAvx2(const float* x, int64_t n, float* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 in = _mm256_and_ps(_mm256_cmp_ps(v, _mm256_set1_ps(kLow), _CMP_GE_OQ),
                                    _mm256_cmp_ps(v, _mm256_set1_ps(kHigh), _CMP_LE_OQ));
    if (_mm256_movemask_ps(in) != 0xff) {
      ExpScalar(x + i, 8, y + i);
      continue;
    }
    const __m128 a = Exp4Avx2(_mm256_castps256_ps128(v));
    const __m128 b = Exp4Avx2(_mm256_extractf128_ps(v, 1));
    _mm256_storeu_ps(y + i, _mm256_insertf128_ps(_mm256_castps128_ps256(a), b, 1));
  }
  ExpScalar(x + i, n - i, y + i);
}

}  // namespace

void Exp(const float* x, int64_t n, float* y) {
  switch (ActiveLinearIsa()) {
    case LinearIsa::kAvx512: return ExpAvx512(x, n, y);
    case LinearIsa::kAvx2: return ExpAvx2(x, n, y);
    default: return ExpScalar(x, n, y);
  }
}

}  // namespace tandem::cpu
