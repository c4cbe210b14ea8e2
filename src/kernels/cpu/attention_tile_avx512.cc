// attention_tile.h with AVX-512: the 16 query rows of a tile in the 16 lanes of a vector for the
// scores and the softmax, keys broadcast (so each score is one FMA chain over head_dim in order, as
// in sgemm); the outputs vectorized over head_dim with the probabilities broadcast (one FMA chain over
// the keys in order). Target attributes as gemv_avx512.cc: the rest of the binary keeps the
// baseline ISA.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/cpu/attention_tile.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/vexp.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TANDEM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

namespace tandem::cpu {
namespace {

constexpr int kLanes = 16;
constexpr int kMaxHeadDim = 256;

// Lanes (query rows) that see key p: r < rows and p < first_valid + r.
inline __mmask16 ValidLanes(int p, int rows, int first_valid) {
  const int lo = p - first_valid + 1;  // the first row that sees p
  const uint32_t all = (1u << rows) - 1;
  return static_cast<__mmask16>(lo <= 0 ? all : (lo >= rows ? 0u : all & ~((1u << lo) - 1)));
}

// s[p * 16 + r] = scale * (q_r . k_p) for keys [p0, p0 + KB): qt is the tile transposed, [d][16].
template <int KB>
TANDEM_AVX512 inline void Scores(const float* qt, const float* keys, int d, int p0, float scale, float* s) {
  __m512 acc[KB];
#pragma GCC unroll 16
  for (int j = 0; j < KB; ++j) acc[j] = _mm512_setzero_ps();
  const float* k0 = keys + static_cast<long>(p0) * d;
  for (int c = 0; c < d; ++c) {
    const __m512 qv = _mm512_load_ps(qt + c * kLanes);
#pragma GCC unroll 16
    for (int j = 0; j < KB; ++j) acc[j] = _mm512_fmadd_ps(qv, _mm512_set1_ps(k0[j * d + c]), acc[j]);
  }
  const __m512 sv = _mm512_set1_ps(scale);
#pragma GCC unroll 16
  for (int j = 0; j < KB; ++j) _mm512_store_ps(s + static_cast<long>(p0 + j) * kLanes, _mm512_mul_ps(sv, acc[j]));
}

// out_r[e0, e0 + 64) for the RB rows r0.. (r0 + RB - 1): row r0 + i sums keys p < n0 + i of
// prob[p][r] v_p. Past its own keys a row's probabilities are 0 (adding 0 * v changes no sum), so
// the rows run their first n0 keys together and the later rows take their last keys after.
template <int RB>
TANDEM_AVX512 inline void Outputs(const float* prob, const float* values, int d, int e0, int r0, int n0,
                                  float* out, long out_stride) {
  __m512 acc[RB][4];
#pragma GCC unroll 4
  for (int i = 0; i < RB; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int p = 0; p < n0; ++p) {
    const float* vp = values + static_cast<long>(p) * d + e0;
    const __m512 v0 = _mm512_loadu_ps(vp), v1 = _mm512_loadu_ps(vp + 16);
    const __m512 v2 = _mm512_loadu_ps(vp + 32), v3 = _mm512_loadu_ps(vp + 48);
#pragma GCC unroll 4
    for (int i = 0; i < RB; ++i) {
      const __m512 pr = _mm512_set1_ps(prob[static_cast<long>(p) * kLanes + r0 + i]);
      acc[i][0] = _mm512_fmadd_ps(pr, v0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(pr, v1, acc[i][1]);
      acc[i][2] = _mm512_fmadd_ps(pr, v2, acc[i][2]);
      acc[i][3] = _mm512_fmadd_ps(pr, v3, acc[i][3]);
    }
  }
#pragma GCC unroll 4
  for (int i = 1; i < RB; ++i) {
    for (int p = n0; p < n0 + i; ++p) {
      const float* vp = values + static_cast<long>(p) * d + e0;
      const __m512 pr = _mm512_set1_ps(prob[static_cast<long>(p) * kLanes + r0 + i]);
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_fmadd_ps(pr, _mm512_loadu_ps(vp + 16 * v), acc[i][v]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < RB; ++i) {
    float* o = out + (r0 + i) * out_stride + e0;
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(o + 16 * v, acc[i][v]);
  }
}

TANDEM_AVX512 void Tile(const float* q, long q_stride, int rows, const float* keys, const float* values, int d,
                        int first_valid, float scale, float* out, long out_stride) {
  const int n_keys = first_valid + rows - 1;
  alignas(64) float qt[kMaxHeadDim * kLanes];
  for (int c = 0; c < d; ++c) {
    for (int r = 0; r < kLanes; ++r) qt[c * kLanes + r] = r < rows ? q[r * q_stride + c] : 0.0f;
  }
  thread_local std::vector<float, std::allocator<float>> buffer;
  if (buffer.size() < static_cast<size_t>(n_keys) * kLanes + kLanes) buffer.resize(static_cast<size_t>(n_keys) * kLanes + kLanes);
  // 64-byte aligned rows of 16 scores.
  float* s = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buffer.data()) + 63) & ~uintptr_t{63});

  int p = 0;
  for (; p + 16 <= n_keys; p += 16) Scores<16>(qt, keys, d, p, scale, s);
  for (; p + 4 <= n_keys; p += 4) Scores<4>(qt, keys, d, p, scale, s);
  for (; p < n_keys; ++p) Scores<1>(qt, keys, d, p, scale, s);

  // Softmax of each lane over its keys (SoftmaxRow's operations).
  __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (p = 0; p < n_keys; ++p) {
    mx = _mm512_mask_max_ps(mx, ValidLanes(p, rows, first_valid), mx, _mm512_load_ps(s + p * kLanes));
  }
  // x - max on the valid lanes, 0 elsewhere (exp(0) stays on Exp's vector path; zeroed below).
  for (p = 0; p < n_keys; ++p) {
    float* sp = s + p * kLanes;
    _mm512_store_ps(sp, _mm512_maskz_sub_ps(ValidLanes(p, rows, first_valid), _mm512_load_ps(sp), mx));
  }
  Exp(s, static_cast<int64_t>(n_keys) * kLanes, s);
  __m512 sum = _mm512_setzero_ps();
  for (p = 0; p < n_keys; ++p) {
    float* sp = s + p * kLanes;
    const __m512 e = _mm512_maskz_mov_ps(ValidLanes(p, rows, first_valid), _mm512_load_ps(sp));
    sum = _mm512_add_ps(sum, e);  // key order; a lane's invalid keys (all after its last) add 0
    _mm512_store_ps(sp, e);
  }
  const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), sum);
  for (p = 0; p < n_keys; ++p) {
    float* sp = s + p * kLanes;
    _mm512_store_ps(sp, _mm512_mul_ps(_mm512_load_ps(sp), inv));
  }

  for (int e0 = 0; e0 < d; e0 += 64) {
    int r = 0;
    for (; r + 4 <= rows; r += 4) Outputs<4>(s, values, d, e0, r, first_valid + r, out, out_stride);
    for (; r < rows; ++r) Outputs<1>(s, values, d, e0, r, first_valid + r, out, out_stride);
  }
}

}  // namespace

bool AttentionTileSupported(int head_dim) {
  return head_dim > 0 && head_dim % 64 == 0 && head_dim <= kMaxHeadDim &&
         ActiveLinearIsa() == LinearIsa::kAvx512;
}

void AttentionTileAvx512(const float* q, long q_stride, int rows, const float* keys, const float* values,
                         int head_dim, int first_valid, float scale, float* out, long out_stride) {
  Tile(q, q_stride, rows, keys, values, head_dim, first_valid, scale, out, out_stride);
}

}  // namespace tandem::cpu

#else  // not x86

namespace tandem::cpu {
bool AttentionTileSupported(int) { return false; }
void AttentionTileAvx512(const float*, long, int, const float*, const float*, int, int, float, float*, long) {}
}  // namespace tandem::cpu

#endif
