// gemv.h's kernels for AVX2 with FMA and F16C: 8 fp32 lanes, W converted in registers. As in
// gemv_avx512.cc, every function carries the target attribute and has internal linkage.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemv.h"

#define TANDEM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace tandem::cpu {
namespace {

// 8 elements of type T at p, as fp32 (exact).
template <WeightType T>
TANDEM_AVX2 inline __m256 Load8(const uint8_t* p) {
  if constexpr (T == WeightType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (T == WeightType::kBF16) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
}

// The first n (< 8) elements at p, the rest 0: through a zero-padded copy (nothing past them is read).
template <WeightType T>
TANDEM_AVX2 inline __m256 Load8Partial(const uint8_t* p, int64_t n) {
  constexpr int kBytes = T == WeightType::kF32 ? 4 : 2;
  alignas(32) uint8_t buf[32] = {};
  std::memcpy(buf, p, static_cast<size_t>(n) * kBytes);
  return Load8<T>(buf);
}

// [sum(a), sum(b), sum(c), sum(d)].
TANDEM_AVX2 inline __m128 Reduce4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

TANDEM_AVX2 inline float Reduce1(__m256 a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Rows [j0, j0 + R) of W against MB rows of x (row stride k): y[i * ldy + j0 + r].
template <WeightType T, int MB, int R>
TANDEM_AVX2 void Block(const float* x, int64_t k, const uint8_t* w, int64_t j0, const float* bias, float* y,
                       int64_t ldy) {
  constexpr int kBytes = T == WeightType::kF32 ? 4 : 2;
  const int64_t stride = k * kBytes;
  const uint8_t* w0 = w + j0 * stride;
  __m256 acc[MB][R];
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
  }
  int64_t c = 0;
  for (; c + 8 <= k; c += 8) {
    __m256 wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = Load8<T>(w0 + r * stride + c * kBytes);
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * k + c);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  if (c < k) {
    __m256 wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = Load8Partial<T>(w0 + r * stride + c * kBytes, k - c);
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) {
      const __m256 xv = Load8Partial<WeightType::kF32>(reinterpret_cast<const uint8_t*>(x + i * k + c), k - c);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(xv, wv[r], acc[i][r]);
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
        const float s = Reduce1(acc[i][r]);
        yi[r] = bias != nullptr ? s + bias[j0 + r] : s;
      }
    }
  }
}

template <WeightType T, int MB, int R>
TANDEM_AVX2 void Rows(const float* x, int64_t k, const uint8_t* w, int64_t row_begin, int64_t row_end,
                      const float* bias, float* y, int64_t ldy) {
  int64_t j = row_begin;
  for (; j + R <= row_end; j += R) Block<T, MB, R>(x, k, w, j, bias, y, ldy);
  for (; j < row_end; ++j) Block<T, MB, 1>(x, k, w, j, bias, y, ldy);
}

template <WeightType T>
TANDEM_AVX2 void GemvT(const float* x, int m, const WeightMatrix& w, int64_t row_begin, int64_t row_end,
                       const float* bias, float* y, int64_t ldy) {
  const int64_t k = w.cols;
  const uint8_t* wp = static_cast<const uint8_t*>(w.data);
  // 16 registers: two rows of x by four of W (8 accumulators), or one row by eight. W in tiles of
  // ~16 KiB that every pair of x rows runs over while the tile is in L1 (W read once for all m).
  constexpr int kBytes = T == WeightType::kF32 ? 4 : 2;
  const int64_t tile = std::max<int64_t>(8, 16384 / (k * kBytes) / 8 * 8);
  for (int64_t j0 = row_begin; j0 < row_end; j0 += tile) {
    const int64_t j1 = std::min(row_end, j0 + tile);
    for (int i0 = 0; i0 < m; i0 += 2) {
      const float* xi = x + static_cast<int64_t>(i0) * k;
      float* yi = y + static_cast<int64_t>(i0) * ldy;
      if (m - i0 == 1) {
        Rows<T, 1, 8>(xi, k, wp, j0, j1, bias, yi, ldy);
      } else {
        Rows<T, 2, 4>(xi, k, wp, j0, j1, bias, yi, ldy);
      }
    }
  }
}

TANDEM_AVX2 void GemvAvx2(const float* x, int m, const WeightMatrix& w, int64_t row_begin, int64_t row_end,
                          const float* bias, float* y, int64_t ldy) {
  switch (w.type) {
    case WeightType::kBF16: return GemvT<WeightType::kBF16>(x, m, w, row_begin, row_end, bias, y, ldy);
    case WeightType::kF16: return GemvT<WeightType::kF16>(x, m, w, row_begin, row_end, bias, y, ldy);
    case WeightType::kF32: return GemvT<WeightType::kF32>(x, m, w, row_begin, row_end, bias, y, ldy);
  }
}

template <WeightType T>
TANDEM_AVX2 void ConvertT(const uint8_t* src, int64_t n, float* out) {
  constexpr int kBytes = T == WeightType::kF32 ? 4 : 2;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, Load8<T>(src + i * kBytes));
  if (i < n) {
    alignas(32) float tail[8];
    _mm256_store_ps(tail, Load8Partial<T>(src + i * kBytes, n - i));
    std::memcpy(out + i, tail, static_cast<size_t>(n - i) * sizeof(float));
  }
}

TANDEM_AVX2 void ConvertAvx2(const WeightMatrix& w, int64_t row_begin, int64_t num_rows, float* out) {
  const uint8_t* src = w.At(row_begin, 0);
  const int64_t n = num_rows * w.cols;
  switch (w.type) {
    case WeightType::kBF16: return ConvertT<WeightType::kBF16>(src, n, out);
    case WeightType::kF16: return ConvertT<WeightType::kF16>(src, n, out);
    case WeightType::kF32: return ConvertT<WeightType::kF32>(src, n, out);
  }
}

}  // namespace

GemvKernels Avx2GemvKernels() { return {LinearIsa::kAvx2, GemvAvx2, ConvertAvx2}; }

}  // namespace tandem::cpu
