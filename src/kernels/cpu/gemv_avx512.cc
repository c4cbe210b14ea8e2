// gemv.h's kernels for AVX-512 (F + BW + VL, with FMA and F16C): 16 fp32 lanes, W converted in
// registers. Every function here carries the target attribute, so the rest of the binary keeps the
// baseline ISA and runs on CPUs without AVX-512 (matmul.cc calls in only where the CPU has it).
// Only internal-linkage code below: no inline function of a header is instantiated with AVX-512.
// GCC 12's AVX-512 headers start some intrinsics from an undefined register (_mm512_undefined_*),
// which -Wuninitialized reports at every inlining site (GCC PR 105593, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/gemv.h"

#define TANDEM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

namespace tandem::cpu {
namespace {

// 16 elements of type T at p, as fp32 (exact).
template <WeightType T>
TANDEM_AVX512 inline __m512 Load16(const uint8_t* p) {
  if constexpr (T == WeightType::kF32) {
    return _mm512_loadu_ps(p);
  } else if constexpr (T == WeightType::kBF16) {
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
}

// The first elements of the 16 at p that `mask` selects; the rest 0 (nothing past them is read).
template <WeightType T>
TANDEM_AVX512 inline __m512 Load16Masked(const uint8_t* p, __mmask16 mask) {
  if constexpr (T == WeightType::kF32) {
    return _mm512_maskz_loadu_ps(mask, p);
  } else if constexpr (T == WeightType::kBF16) {
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  } else {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p));
  }
}

// [sum(a), sum(b), sum(c), sum(d)].
TANDEM_AVX512 inline __m128 Reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  // Per 128-bit lane: ab = [a0+a2, b0+b2, a1+a3, b1+b3], cd likewise, abcd = [a, b, c, d] partial sums.
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 lo = _mm512_castps512_ps256(abcd);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(abcd), 1));
  const __m256 s = _mm256_add_ps(lo, hi);
  return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// Rows [j0, j0 + R) of W against MB rows of x (row stride k): y[i * ldy + j0 + r].
template <WeightType T, int MB, int R>
TANDEM_AVX512 void Block(const float* x, int64_t k, const uint8_t* w, int64_t j0, const float* bias,
                         float* y, int64_t ldy) {
  constexpr int kBytes = T == WeightType::kF32 ? 4 : 2;
  const int64_t stride = k * kBytes;
  const uint8_t* w0 = w + j0 * stride;
  __m512 acc[MB][R];
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  }
  int64_t c = 0;
  for (; c + 16 <= k; c += 16) {
    __m512 wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = Load16<T>(w0 + r * stride + c * kBytes);
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * k + c);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  if (c < k) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (k - c)) - 1);
    __m512 wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = Load16Masked<T>(w0 + r * stride + c * kBytes, mask);
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * k + c);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) {
    float* yi = y + i * ldy + j0;
    if constexpr (R % 4 == 0) {
#pragma GCC unroll 4
      for (int r = 0; r < R; r += 4) {
        __m128 s = Reduce4(acc[i][r], acc[i][r + 1], acc[i][r + 2], acc[i][r + 3]);
        if (bias != nullptr) s = _mm_add_ps(s, _mm_loadu_ps(bias + j0 + r));
        _mm_storeu_ps(yi + r, s);
      }
    } else {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const float s = _mm512_reduce_add_ps(acc[i][r]);
        yi[r] = bias != nullptr ? s + bias[j0 + r] : s;
      }
    }
  }
}

// Rows [row_begin, row_end) against MB rows of x: blocks of R rows, then single rows.
template <WeightType T, int MB, int R>
TANDEM_AVX512 void Rows(const float* x, int64_t k, const uint8_t* w, int64_t row_begin, int64_t row_end,
                        const float* bias, float* y, int64_t ldy) {
  int64_t j = row_begin;
  for (; j + R <= row_end; j += R) Block<T, MB, R>(x, k, w, j, bias, y, ldy);
  for (; j < row_end; ++j) Block<T, MB, 1>(x, k, w, j, bias, y, ldy);
}

template <WeightType T>
TANDEM_AVX512 void GemvT(const float* x, int m, const WeightMatrix& w, int64_t row_begin, int64_t row_end,
                         const float* bias, float* y, int64_t ldy) {
  const int64_t k = w.cols;
  const uint8_t* wp = static_cast<const uint8_t*>(w.data);
  // Up to 4 rows of x share one pass over a block of W (16 accumulators of 32 registers); one or two
  // rows take blocks of 8 rows of W, for more independent FMA chains. W goes in tiles of ~16 KiB that
  // every group of x rows runs over while the tile is in L1: W is read from memory once for all m.
  constexpr int kBytes = T == WeightType::kF32 ? 4 : 2;
  const int64_t tile = std::max<int64_t>(8, 16384 / (k * kBytes) / 8 * 8);
  for (int64_t j0 = row_begin; j0 < row_end; j0 += tile) {
    const int64_t j1 = std::min(row_end, j0 + tile);
    for (int i0 = 0; i0 < m; i0 += 4) {
      const float* xi = x + static_cast<int64_t>(i0) * k;
      float* yi = y + static_cast<int64_t>(i0) * ldy;
      switch (m - i0 < 4 ? m - i0 : 4) {
        case 1: Rows<T, 1, 8>(xi, k, wp, j0, j1, bias, yi, ldy); break;
        case 2: Rows<T, 2, 8>(xi, k, wp, j0, j1, bias, yi, ldy); break;
        case 3: Rows<T, 3, 4>(xi, k, wp, j0, j1, bias, yi, ldy); break;
        default: Rows<T, 4, 4>(xi, k, wp, j0, j1, bias, yi, ldy); break;
      }
    }
  }
}

TANDEM_AVX512 void GemvAvx512(const float* x, int m, const WeightMatrix& w, int64_t row_begin,
                              int64_t row_end, const float* bias, float* y, int64_t ldy) {
  switch (w.type) {
    case WeightType::kBF16: return GemvT<WeightType::kBF16>(x, m, w, row_begin, row_end, bias, y, ldy);
    case WeightType::kF16: return GemvT<WeightType::kF16>(x, m, w, row_begin, row_end, bias, y, ldy);
    case WeightType::kF32: return GemvT<WeightType::kF32>(x, m, w, row_begin, row_end, bias, y, ldy);
  }
}

template <WeightType T>
TANDEM_AVX512 void ConvertT(const uint8_t* src, int64_t n, float* out) {
  constexpr int kBytes = T == WeightType::kF32 ? 4 : 2;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, Load16<T>(src + i * kBytes));
  if (i < n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, mask, Load16Masked<T>(src + i * kBytes, mask));
  }
}

TANDEM_AVX512 void ConvertAvx512(const WeightMatrix& w, int64_t row_begin, int64_t num_rows, float* out) {
  const uint8_t* src = w.At(row_begin, 0);
  const int64_t n = num_rows * w.cols;
  switch (w.type) {
    case WeightType::kBF16: return ConvertT<WeightType::kBF16>(src, n, out);
    case WeightType::kF16: return ConvertT<WeightType::kF16>(src, n, out);
    case WeightType::kF32: return ConvertT<WeightType::kF32>(src, n, out);
  }
}

}  // namespace

GemvKernels Avx512GemvKernels() { return {LinearIsa::kAvx512, GemvAvx512, ConvertAvx512}; }

}  // namespace tandem::cpu
