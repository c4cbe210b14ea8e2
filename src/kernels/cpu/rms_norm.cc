#include "kernels/cpu/rms_norm.h"

// GCC 12's AVX-512 headers: see gemv_avx512.cc.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TANDEM_HAVE_X86 1
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace tandem::cpu {

namespace {

// inv_rms of a row from its sum of squares; y = w * (x * inv_rms). The same operations in every
// version below.
float InvRms(double sum_sq, int dim, float eps) {
  const float variance = static_cast<float>(sum_sq / dim);
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(variance + eps)));
}

void Scale(const float* x, const float* w, int dim, float inv_rms, float* y) {
  for (int i = 0; i < dim; ++i) y[i] = w[i] * (x[i] * inv_rms);
}

// kRows rows at once: each row's sum of squares in double, in index order as one row alone would
// take it; the rows' sums are independent chains, so a few run side by side instead of one add
// latency per element.
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
    Scale(x + static_cast<long>(r) * dim, w, dim, InvRms(sum_sq[r], dim, eps), y + static_cast<long>(r) * dim);
  }
}

void RowsPortable(const float* x, const float* w, int num_rows, int dim, float eps, float* y) {
  constexpr int kGroup = 4;
  int r = 0;
  for (; r + kGroup <= num_rows; r += kGroup) {
    RowGroup<kGroup>(x + static_cast<long>(r) * dim, w, dim, eps, y + static_cast<long>(r) * dim);
  }
  for (; r < num_rows; ++r) RowGroup<1>(x + static_cast<long>(r) * dim, w, dim, eps, y + static_cast<long>(r) * dim);
}

#ifdef TANDEM_HAVE_X86
#define TANDEM_AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma")))

// 8 rows, one per double lane: an 8 x 8 block of floats transposed so that each vector holds one
// column (element i of the 8 rows), widened, and accumulated with FMA (the product of two widened
// floats is exact in double, so fma(v, v, s) rounds once like the add after the exact product).
TANDEM_AVX512 void RowGroup8Avx512(const float* x, const float* w, int dim, float eps, float* y) {
  __m512d acc = _mm512_setzero_pd();
  int i = 0;
  for (; i + 8 <= dim; i += 8) {
    __m256 r[8];
    for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(x + static_cast<long>(j) * dim + i);
    // Transpose: t = interleaved pairs, u = interleaved quads, then the 128-bit halves.
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    // Column c (element i + c of rows 0..7), in order c = 0..7.
    const __m256 col[8] = {
        _mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
        _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
        _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
        _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
    for (int c = 0; c < 8; ++c) {
      const __m512d v = _mm512_cvtps_pd(col[c]);
      acc = _mm512_fmadd_pd(v, v, acc);
    }
  }
  alignas(64) double sum_sq[8];
  _mm512_store_pd(sum_sq, acc);
  for (int r = 0; r < 8; ++r) {
    const float* xr = x + static_cast<long>(r) * dim;
    for (int e = i; e < dim; ++e) {
      const double v = xr[e];
      sum_sq[r] += v * v;
    }
  }
  for (int r = 0; r < 8; ++r) {
    const float* xr = x + static_cast<long>(r) * dim;
    float* yr = y + static_cast<long>(r) * dim;
    const __m512 inv = _mm512_set1_ps(InvRms(sum_sq[r], dim, eps));
    int e = 0;
    for (; e + 16 <= dim; e += 16) {
      _mm512_storeu_ps(yr + e, _mm512_mul_ps(_mm512_loadu_ps(w + e), _mm512_mul_ps(_mm512_loadu_ps(xr + e), inv)));
    }
    Scale(xr + e, w + e, dim - e, InvRms(sum_sq[r], dim, eps), yr + e);
  }
}

void RowsAvx512(const float* x, const float* w, int num_rows, int dim, float eps, float* y) {
  int r = 0;
  for (; r + 8 <= num_rows; r += 8) {
    RowGroup8Avx512(x + static_cast<long>(r) * dim, w, dim, eps, y + static_cast<long>(r) * dim);
  }
  RowsPortable(x + static_cast<long>(r) * dim, w, num_rows - r, dim, eps, y + static_cast<long>(r) * dim);
}
#endif

}  // namespace

void RmsNormRows(const float* x, const float* w, int num_rows, int dim, float eps, float* y) {
#ifdef TANDEM_HAVE_X86
  if (ActiveLinearIsa() == LinearIsa::kAvx512) return RowsAvx512(x, w, num_rows, dim, eps, y);
#endif
  RowsPortable(x, w, num_rows, dim, eps, y);
}

void RmsNorm(const float* x, const float* w, int num_rows, int dim, float eps, float* y) {
  // Rows on the CPU pool (each row's arithmetic unchanged): about 16k elements a task.
  ParallelForRange(num_rows, std::max(1, 16384 / std::max(dim, 1)), [&](int64_t begin, int64_t end) {
    RmsNormRows(x + begin * dim, w, static_cast<int>(end - begin), dim, eps, y + begin * dim);
  });
}

}  // namespace tandem::cpu
