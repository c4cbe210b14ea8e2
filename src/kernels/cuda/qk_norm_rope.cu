#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/fp8_utils.cuh"
#include "kernels/cuda/qk_norm_rope.h"

#include <cstdint>

namespace tandem::cuda::detail {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxPairsPerLane = 4;  // head_dim <= 2 * 32 * 4 = 256

// FP8 KV: 1 / the KV head's scale (1 without scales), and a value's code as the pool stores it:
// the bf16 value (what the bf16 pool would hold) times that, rounded to e4m3.
__device__ inline float InvScale(const float* scales, int kvh) {
  return scales != nullptr ? 1.0f / scales[kvh] : 1.0f;
}
__device__ inline uint8_t KvCode(float bf16_value, float inv_scale) {
  return FloatToFp8(bf16_value * inv_scale);
}
// Eight values -> eight codes in one 8-byte word (element e in byte e).
__device__ inline uint2 KvCodes8(const float (&v)[8], float inv_scale) {
  uint32_t w[2] = {0, 0};
#pragma unroll
  for (int e = 0; e < 8; ++e) w[e / 4] |= static_cast<uint32_t>(KvCode(RoundBf16(v[e]), inv_scale)) << (8 * (e % 4));
  return make_uint2(w[0], w[1]);
}

// One warp per (token, head), q heads first then k heads. Lane l owns the rotation pairs
// (i, i + half) for i = l, l + 32, ... < half. kCache (QkNormRopeCache): a k head goes to the pool
// at the token's slot instead of back in place, and its warp copies the v head there too.
template <bool kCache>
__global__ void QkNormRopeKernel(QkNormRopeCacheArgs c) {
  const QkNormRopeArgs& a = c.rope;
  const int lane = threadIdx.x & 31;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int heads = a.num_heads + a.num_kv_heads;
  if (item >= static_cast<int64_t>(a.num_tokens) * heads) return;
  const int t = static_cast<int>(item / heads);
  const int h = static_cast<int>(item % heads);
  const bool is_q = h < a.num_heads;
  __nv_bfloat16* x = is_q ? a.q + t * a.q_stride + static_cast<int64_t>(h) * a.head_dim
                          : a.k + t * a.k_stride + static_cast<int64_t>(h - a.num_heads) * a.head_dim;
  const __nv_bfloat16* w = is_q ? a.q_norm : a.k_norm;
  const int half = a.head_dim / 2;
  __nv_bfloat16* dst = x;  // where the rotated head goes
  uint8_t* dst8 = nullptr;  // or its codes (FP8 KV)
  float inv_k = 1.0f;
  if constexpr (kCache) {
    if (!is_q) {
      const int64_t slot = c.slot_mapping[t];
      if (slot < 0) return;  // padding token: nothing to cache (k is not needed elsewhere)
      const int kvh = h - a.num_heads;
      const int64_t row = static_cast<int64_t>(a.num_kv_heads) * a.head_dim;
      const int64_t block = slot / c.block_size, offset = slot % c.block_size;
      const int64_t at = ((block * 2 + 0) * c.block_size + offset) * row + static_cast<int64_t>(kvh) * a.head_dim;
      const int64_t v_shift = static_cast<int64_t>(c.block_size) * row;
      const __nv_bfloat16* v_src = c.v + t * c.v_stride + static_cast<int64_t>(kvh) * a.head_dim;
      if (c.kv_pool_fp8 != nullptr) {
        dst8 = c.kv_pool_fp8 + at;
        inv_k = InvScale(c.k_scales, kvh);
        const float inv_v = InvScale(c.v_scales, kvh);
        for (int i = lane; i < a.head_dim; i += 32) dst8[v_shift + i] = KvCode(__bfloat162float(v_src[i]), inv_v);
      } else {
        dst = c.kv_pool + at;
        for (int i = lane; i < a.head_dim; i += 32) dst[v_shift + i] = v_src[i];
      }
    }
  }

  float x1[kMaxPairsPerLane], x2[kMaxPairsPerLane];
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxPairsPerLane; ++j) {
    const int i = lane + 32 * j;
    x1[j] = i < half ? __bfloat162float(x[i]) : 0.0f;
    x2[j] = i < half ? __bfloat162float(x[i + half]) : 0.0f;
    sum_sq += x1[j] * x1[j] + x2[j] * x2[j];
  }
  if (w != nullptr) {
    sum_sq = WarpSum(sum_sq);
    const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(a.head_dim) + a.eps);
#pragma unroll
    for (int j = 0; j < kMaxPairsPerLane; ++j) {
      const int i = lane + 32 * j;
      if (i < half) {
        x1[j] = RoundBf16(__bfloat162float(w[i]) * RoundBf16(x1[j] * inv_rms));
        x2[j] = RoundBf16(__bfloat162float(w[i + half]) * RoundBf16(x2[j] * inv_rms));
      }
    }
  }
  const float pos = static_cast<float>(a.positions[t]);
#pragma unroll
  for (int j = 0; j < kMaxPairsPerLane; ++j) {
    const int i = lane + 32 * j;
    if (i < half) {
      const float angle = pos * a.inv_freq[i];
      float s, co;
      sincosf(angle, &s, &co);
      const __nv_bfloat16 y1 = __float2bfloat16_rn(x1[j] * co - x2[j] * s);
      const __nv_bfloat16 y2 = __float2bfloat16_rn(x2[j] * co + x1[j] * s);
      if (dst8 != nullptr) {
        dst8[i] = KvCode(__bfloat162float(y1), inv_k);
        dst8[i + half] = KvCode(__bfloat162float(y2), inv_k);
      } else {
        dst[i] = y1;
        dst[i + half] = y2;
      }
    }
  }
}


// The vectorized kernel for head_dim 64, 128 and 256 with 16-byte aligned rows: lane j of a head's
// HD / 8 lanes holds elements [8 j, 8 j + 8) (one 16-byte load and store), so lanes j and
// j ^ (HD / 16) hold rotation partners (i, i + HD / 2) and swap them by shuffle; 32 / (HD / 8)
// heads sit side by side in a warp. A warp takes one token and every warps_per_token-th group of
// heads; the token's HD / 2 angles are computed once per warp, HD / 64 per lane, and handed to the
// lanes that need them by shuffle (sincosf was most of the old kernel's instructions: every head
// recomputed all of them). Same math per element as QkNormRopeKernel.
template <int HD, bool kCache>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) QkNormRopeVecKernel(QkNormRopeCacheArgs c,
                                                                           int warps_per_token) {
  constexpr int kLanes = HD / 8;         // lanes per head
  constexpr int kSide = 32 / kLanes;     // heads side by side in a warp
  constexpr int kPartner = kLanes / 2;   // lane distance between elements i and i + HD / 2
  constexpr int kFreqs = HD / 2 / 32;    // angles per lane: lane L has L * kFreqs + r, r < kFreqs
  static_assert(kFreqs >= 1 && 8 % kFreqs == 0);
  const QkNormRopeArgs& a = c.rope;
  const int lane = threadIdx.x & 31;
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (gw >= static_cast<int64_t>(a.num_tokens) * warps_per_token) return;
  const int t = static_cast<int>(gw / warps_per_token);
  const int w = static_cast<int>(gw % warps_per_token);
  const int side = lane / kLanes, j = lane % kLanes;
  const bool low = j < kPartner;
  const int f0 = (j % kPartner) * 8;  // this lane's first angle index

  float cf[kFreqs], sf[kFreqs];
  const float pos = static_cast<float>(a.positions[t]);
#pragma unroll
  for (int r = 0; r < kFreqs; ++r) sincosf(pos * a.inv_freq[lane * kFreqs + r], &sf[r], &cf[r]);
  float co[8], sn[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {  // angle f0 + e lives in lane (f0 + e) / kFreqs, slot e % kFreqs
    co[e] = __shfl_sync(kFullMask, cf[e % kFreqs], (f0 + e) / kFreqs);
    sn[e] = __shfl_sync(kFullMask, sf[e % kFreqs], (f0 + e) / kFreqs);
  }
  auto load8 = [](const __nv_bfloat16* p, float (&v)[8]) { Bf16x8ToFloat(*reinterpret_cast<const uint4*>(p), v); };
  float wq[8], wk[8];
  if (a.q_norm != nullptr) load8(a.q_norm + 8 * j, wq);
  if (a.k_norm != nullptr) load8(a.k_norm + 8 * j, wk);
  int64_t slot = 0;
  if constexpr (kCache) slot = c.slot_mapping[t];
  const int64_t row = static_cast<int64_t>(a.num_kv_heads) * HD;

  const int heads = a.num_heads + a.num_kv_heads;
  for (int hb = kSide * w; hb < heads; hb += kSide * warps_per_token) {
    const int h = hb + side;
    const bool is_q = h < a.num_heads;
    // Lanes past the last head, and k heads of padding tokens (kCache: nothing to write), compute
    // on zeros and store nothing; every lane takes part in the shuffles.
    bool active = h < heads;
    if constexpr (kCache) active = active && (is_q || slot >= 0);
    __nv_bfloat16* x = is_q ? a.q + t * a.q_stride + static_cast<int64_t>(h) * HD
                            : a.k + t * a.k_stride + static_cast<int64_t>(h - a.num_heads) * HD;
    float v[8];
    if (active) {
      load8(x + 8 * j, v);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = 0.0f;
    }
    __nv_bfloat16* dst = x;
    uint8_t* dst8 = nullptr;  // FP8 KV: k's codes go here
    float inv_k = 1.0f;
    if constexpr (kCache) {
      if (!is_q && active) {  // k to the pool at the token's slot, v copied beside it
        const int kvh = h - a.num_heads;
        const int64_t block = slot / c.block_size, offset = slot % c.block_size;
        const int64_t at = ((block * 2 + 0) * c.block_size + offset) * row + static_cast<int64_t>(kvh) * HD;
        const int64_t v_shift = static_cast<int64_t>(c.block_size) * row;
        const __nv_bfloat16* v_src = c.v + t * c.v_stride + static_cast<int64_t>(kvh) * HD + 8 * j;
        if (c.kv_pool_fp8 != nullptr) {
          dst8 = c.kv_pool_fp8 + at;
          inv_k = InvScale(c.k_scales, kvh);
          float vv[8];
          load8(v_src, vv);
          *reinterpret_cast<uint2*>(dst8 + v_shift + 8 * j) = KvCodes8(vv, InvScale(c.v_scales, kvh));
        } else {
          dst = c.kv_pool + at;
          *reinterpret_cast<uint4*>(dst + v_shift + 8 * j) = *reinterpret_cast<const uint4*>(v_src);
        }
      }
    }
    const __nv_bfloat16* wn = is_q ? a.q_norm : a.k_norm;
    if (wn != nullptr) {  // uniform over the warp: q and k are both normed or neither
      float sum_sq = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) sum_sq += v[e] * v[e];
#pragma unroll
      for (int off = kLanes / 2; off > 0; off >>= 1) sum_sq += __shfl_xor_sync(kFullMask, sum_sq, off);
      const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(HD) + a.eps);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = RoundBf16((is_q ? wq[e] : wk[e]) * RoundBf16(v[e] * inv_rms));
    }
    float pv[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) pv[e] = __shfl_xor_sync(kFullMask, v[e], kPartner);
    if (active) {
      float y[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) y[e] = low ? v[e] * co[e] - pv[e] * sn[e] : v[e] * co[e] + pv[e] * sn[e];
      if (dst8 != nullptr) {
        *reinterpret_cast<uint2*>(dst8 + 8 * j) = KvCodes8(y, inv_k);
      } else {
        *reinterpret_cast<uint4*>(dst + 8 * j) = FloatToBf16x8(y);
      }
    }
  }
}

template <int HD, bool kCache>
cudaError_t LaunchVec(const QkNormRopeCacheArgs& c, cudaStream_t stream) {
  const QkNormRopeArgs& a = c.rope;
  constexpr int kSide = 32 / (HD / 8);
  const int groups = (a.num_heads + a.num_kv_heads + kSide - 1) / kSide;
  // Few tokens (decode): a warp per group of heads, the shortest chain. Many: about 4 groups a
  // warp, so the angles are computed once for them.
  const int warps_per_token = a.num_tokens >= 128 ? (groups + 3) / 4 : groups;
  const int64_t warps = static_cast<int64_t>(a.num_tokens) * warps_per_token;
  const int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  auto* kernel = &QkNormRopeVecKernel<HD, kCache>;
  TANDEM_LAUNCH(kernel, static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0, stream, c, warps_per_token);
  return cudaGetLastError();
}

template <bool kCache>
cudaError_t Launch(const QkNormRopeCacheArgs& c, cudaStream_t stream) {
  const QkNormRopeArgs& a = c.rope;
  const int64_t items = static_cast<int64_t>(a.num_tokens) * (a.num_heads + a.num_kv_heads);
  if (items == 0) return cudaSuccess;
  // The vectorized kernel where every row it touches is 16-byte aligned.
  bool vec = (a.head_dim == 64 || a.head_dim == 128 || a.head_dim == 256) && Aligned16(a.q) &&
             Aligned16(a.k) && a.q_stride % 8 == 0 && a.k_stride % 8 == 0 &&
             (a.q_norm == nullptr || Aligned16(a.q_norm)) && (a.k_norm == nullptr || Aligned16(a.k_norm)) &&
             (a.q_norm == nullptr) == (a.k_norm == nullptr);
  if (kCache) {
    vec = vec && Aligned16(c.v) && c.v_stride % 8 == 0 &&
          (c.kv_pool_fp8 != nullptr ? Aligned16(c.kv_pool_fp8) : Aligned16(c.kv_pool));
  }
  if (vec) {
    switch (a.head_dim) {
      case 64: return LaunchVec<64, kCache>(c, stream);
      case 128: return LaunchVec<128, kCache>(c, stream);
      default: return LaunchVec<256, kCache>(c, stream);
    }
  }
  const int64_t blocks = (items + kWarpsPerBlock - 1) / kWarpsPerBlock;
  TANDEM_LAUNCH(QkNormRopeKernel<kCache>, static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0,
                stream, c);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchQkNormRope(const QkNormRopeArgs& a, cudaStream_t stream) {
  QkNormRopeCacheArgs c;
  c.rope = a;
  return Launch<false>(c, stream);
}

cudaError_t LaunchQkNormRopeCache(const QkNormRopeCacheArgs& c, cudaStream_t stream) {
  return Launch<true>(c, stream);
}

}  // namespace tandem::cuda::detail
