#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/qk_norm_rope.h"

namespace tandem::cuda::detail {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxPairsPerLane = 4;  // head_dim <= 2 * 32 * 4 = 256

// One warp per (token, head), q heads first then k heads. Lane l owns the rotation pairs
// (i, i + half) for i = l, l + 32, ... < half.
__global__ void QkNormRopeKernel(QkNormRopeArgs a) {
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
      float s, c;
      sincosf(angle, &s, &c);
      x[i] = __float2bfloat16_rn(x1[j] * c - x2[j] * s);
      x[i + half] = __float2bfloat16_rn(x2[j] * c + x1[j] * s);
    }
  }
}

}  // namespace

cudaError_t LaunchQkNormRope(const QkNormRopeArgs& a, cudaStream_t stream) {
  const int64_t items = static_cast<int64_t>(a.num_tokens) * (a.num_heads + a.num_kv_heads);
  if (items == 0) return cudaSuccess;
  const int64_t blocks = (items + kWarpsPerBlock - 1) / kWarpsPerBlock;
  TANDEM_LAUNCH(QkNormRopeKernel, static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0, stream, a);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::detail
