#include "kernels/cpu/paged_attention.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/reshape_and_cache.h"
#include "kernels/cpu/vexp.h"

namespace tandem::cpu {
namespace {

// Query rows per sgemm: a tile's keys end at its last token (causal), so smaller tiles skip more of
// the masked upper triangle; 32 keeps each sgemm large enough to run near its peak.
constexpr int kQueryTile = 32;

// From this many query tokens, AttentionTileAvx512 where the CPU has it.
constexpr int kTileMinTokens = 4;

// v's data with room for n floats (grown, never shrunk).
float* Buffer(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// FP8 E4M3 code -> float, once.
const float* Fp8Table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = Fp8E4M3ToFloat(static_cast<uint8_t>(i));
    return t;
  }();
  return table.data();
}

// row: [n] scores, softmax in place over the first `valid` entries; the rest set to 0.
void SoftmaxRow(float* row, int valid, int n) {
  float max_v = row[0];
  for (int j = 1; j < valid; ++j) max_v = std::max(max_v, row[j]);
  for (int j = 0; j < valid; ++j) row[j] -= max_v;
  Exp(row, valid, row);  // std::exp's values, vectorized (vexp.h)
  float sum = 0.0f;
  for (int j = 0; j < valid; ++j) sum += row[j];
  const float inv = 1.0f / sum;
  for (int j = 0; j < valid; ++j) row[j] *= inv;
  for (int j = valid; j < n; ++j) row[j] = 0.0f;
}

}  // namespace

void PagedAttention(const PagedAttentionArgs& a) {
  const int ctx = a.start_pos + a.num_tokens;  // keys [0, ctx)
  const int d = a.head_dim;
  const int group = a.num_heads / a.num_kv_heads;
  const long q_row = static_cast<long>(a.num_heads) * d;
  const int kv_begin = a.kv_head_begin;
  const int kv_end = a.kv_head_end < 0 ? a.num_kv_heads : a.kv_head_end;
  // Contiguous copies of the range's heads: [kv_end - kv_begin, ctx, head_dim].
  // Per-thread buffers kept across calls: no allocation nor zero fill per call.
  thread_local std::vector<float> keys_buf, values_buf, scores_buf;
  const size_t kv_size = static_cast<size_t>(kv_end - kv_begin) * ctx * d;
  float* keys = Buffer(keys_buf, kv_size);
  float* values = Buffer(values_buf, kv_size);
  for (int p = 0; p < ctx; ++p) {
    const int64_t slot = static_cast<int64_t>(a.block_table[p / a.block_size]) * a.block_size +
                         p % a.block_size;
    if (a.kv_pool_fp8 != nullptr) {
      const float* fp8 = Fp8Table();
      const uint8_t* k = a.kv_pool_fp8 + KVSlotOffset(slot, 0, a.block_size, a.num_kv_heads, d);
      const uint8_t* v = a.kv_pool_fp8 + KVSlotOffset(slot, 1, a.block_size, a.num_kv_heads, d);
      for (int h = kv_begin; h < kv_end; ++h) {
        float* kd = &keys[(static_cast<size_t>(h - kv_begin) * ctx + p) * d];
        float* vd = &values[(static_cast<size_t>(h - kv_begin) * ctx + p) * d];
        for (int e = 0; e < d; ++e) {
          kd[e] = fp8[k[h * d + e]] * a.k_scale[h];
          vd[e] = fp8[v[h * d + e]] * a.v_scale[h];
        }
      }
      continue;
    }
    const float* k = a.kv_pool + KVSlotOffset(slot, 0, a.block_size, a.num_kv_heads, d);
    const float* v = a.kv_pool + KVSlotOffset(slot, 1, a.block_size, a.num_kv_heads, d);
    for (int h = kv_begin; h < kv_end; ++h) {
      std::memcpy(&keys[(static_cast<size_t>(h - kv_begin) * ctx + p) * d], k + h * d, sizeof(float) * d);
      std::memcpy(&values[(static_cast<size_t>(h - kv_begin) * ctx + p) * d], v + h * d, sizeof(float) * d);
    }
  }
  // Prefill: tiles of 16 queries in our AVX-512 kernel (attention_tile.h: the same arithmetic, without
  // sgemm's packing and with the causal triangle cut per 16 rows); few queries (decode): sgemm.
  const bool tiles = a.num_tokens >= kTileMinTokens && AttentionTileSupported(d);
  float* scores = tiles ? nullptr : Buffer(scores_buf, static_cast<size_t>(std::min(kQueryTile, a.num_tokens)) * ctx);
  for (int h = kv_begin * group; h < kv_end * group; ++h) {
    const int kvh = h / group - kv_begin;
    const float* kh = &keys[static_cast<size_t>(kvh) * ctx * d];
    const float* vh = &values[static_cast<size_t>(kvh) * ctx * d];
    if (tiles) {
      for (int i0 = 0; i0 < a.num_tokens; i0 += 16) {
        AttentionTileAvx512(a.q + i0 * q_row + h * d, q_row, std::min(16, a.num_tokens - i0), kh, vh, d,
                            a.start_pos + i0 + 1, a.scale, a.out + i0 * q_row + h * d, q_row);
      }
      continue;
    }
    for (int i0 = 0; i0 < a.num_tokens; i0 += kQueryTile) {
      const int rows = std::min(kQueryTile, a.num_tokens - i0);
      const int keys_needed = a.start_pos + i0 + rows;  // causal: the tile's last token sees these
      // scores[rows, keys_needed] = scale * Q_tile [rows, d] * K^T [d, keys_needed]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys_needed, d, a.scale,
                  a.q + i0 * q_row + h * d, q_row, kh, d, 0.0f, scores, keys_needed);
      for (int r = 0; r < rows; ++r) {
        SoftmaxRow(scores + static_cast<long>(r) * keys_needed, a.start_pos + i0 + r + 1,
                   keys_needed);
      }
      // out_tile [rows, d] = P [rows, keys_needed] * V [keys_needed, d]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, keys_needed, 1.0f,
                  scores, keys_needed, vh, d, 0.0f, a.out + i0 * q_row + h * d, q_row);
    }
  }
}

void PagedAttentionNaive(const PagedAttentionArgs& a) {
  const int d = a.head_dim;
  const int group = a.num_heads / a.num_kv_heads;
  for (int i = 0; i < a.num_tokens; ++i) {
    const int pos = a.start_pos + i;
    std::vector<float> s(pos + 1);
    for (int h = 0; h < a.num_heads; ++h) {
      const float* q = a.q + (static_cast<long>(i) * a.num_heads + h) * d;
      const int kvh = h / group;
      for (int p = 0; p <= pos; ++p) {
        const int64_t slot = static_cast<int64_t>(a.block_table[p / a.block_size]) * a.block_size +
                             p % a.block_size;
        const float* k = a.kv_pool + KVSlotOffset(slot, 0, a.block_size, a.num_kv_heads, d) +
                         kvh * d;
        float dot = 0.0f;
        for (int e = 0; e < d; ++e) dot += q[e] * k[e];
        s[p] = dot * a.scale;
      }
      SoftmaxRow(s.data(), pos + 1, pos + 1);
      float* o = a.out + (static_cast<long>(i) * a.num_heads + h) * d;
      std::fill(o, o + d, 0.0f);
      for (int p = 0; p <= pos; ++p) {
        const int64_t slot = static_cast<int64_t>(a.block_table[p / a.block_size]) * a.block_size +
                             p % a.block_size;
        const float* v = a.kv_pool + KVSlotOffset(slot, 1, a.block_size, a.num_kv_heads, d) +
                         kvh * d;
        for (int e = 0; e < d; ++e) o[e] += s[p] * v[e];
      }
    }
  }
}

}  // namespace tandem::cpu
