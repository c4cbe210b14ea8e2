#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/qk_norm_rope.h"

namespace tandem::cuda::detail {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxPairsPerLane = 4;  // head_dim <= 2 * 32 * 4 = 256

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
  if constexpr (kCache) {
    if (!is_q) {
      const int64_t slot = c.slot_mapping[t];
      if (slot < 0) return;  // padding token: nothing to cache (k is not needed elsewhere)
      const int kvh = h - a.num_heads;
      const int64_t row = static_cast<int64_t>(a.num_kv_heads) * a.head_dim;
      const int64_t block = slot / c.block_size, offset = slot % c.block_size;
      dst = c.kv_pool + ((block * 2 + 0) * c.block_size + offset) * row +
            static_cast<int64_t>(kvh) * a.head_dim;
      __nv_bfloat16* v_dst = dst + static_cast<int64_t>(c.block_size) * row;
      const __nv_bfloat16* v_src = c.v + t * c.v_stride + static_cast<int64_t>(kvh) * a.head_dim;
      for (int i = lane; i < a.head_dim; i += 32) v_dst[i] = v_src[i];
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
      dst[i] = __float2bfloat16_rn(x1[j] * co - x2[j] * s);
      dst[i + half] = __float2bfloat16_rn(x2[j] * co + x1[j] * s);
    }
  }
}

template <bool kCache>
cudaError_t Launch(const QkNormRopeCacheArgs& c, cudaStream_t stream) {
  const QkNormRopeArgs& a = c.rope;
  const int64_t items = static_cast<int64_t>(a.num_tokens) * (a.num_heads + a.num_kv_heads);
  if (items == 0) return cudaSuccess;
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
