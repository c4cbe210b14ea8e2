#include "kernels/cuda/rms_norm.cuh"

namespace tandem::cuda::detail {
namespace {

// One block per row. Pass 1 forms the (rounded) input row z and sums z^2; pass 2 re-reads z and
// writes y. Each thread touches the same elements in both passes, so y may alias x.
// kVec: dim % 8 == 0 and every row start 16-byte aligned (uint4 accesses).
template <bool kVec, bool kFused>
__global__ void RmsNormKernel(RmsNormArgs a) {
  // A GEMV launched programmatically after this kernel (LinearArgs::programmatic_launch) may
  // start fetching its weights now; it reads this kernel's output only after its wait.
  TriggerDependents();
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* x = a.x + row * a.x_stride;
  __nv_bfloat16* res = kFused ? a.residual + row * a.res_stride : nullptr;
  __nv_bfloat16* y = a.y + row * a.y_stride;
  // z: the normalized row's input: x, or bf16(x + residual) stored back into residual.
  const __nv_bfloat16* z = kFused ? res : x;

  float inv_rms = 0.0f;
  if constexpr (kVec) {
    inv_rms = RmsNormInvRmsVec<kFused>(a, row, scratch);
  } else {
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < a.dim; i += blockDim.x) {
      float v = __bfloat162float(x[i]);
      if constexpr (kFused) {
        v = RoundBf16(v + __bfloat162float(res[i]));
        res[i] = __float2bfloat16_rn(v);
      }
      sum_sq += v * v;
    }
    sum_sq = BlockSum(sum_sq, scratch);
    inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(a.dim) + a.eps);
  }

  if constexpr (kVec) {
    for (int c = threadIdx.x; c < a.dim / 8; c += blockDim.x) {
      float v[8];
      RmsNormEight<kFused>(a, row, c, inv_rms, v);
      reinterpret_cast<uint4*>(y)[c] = FloatToBf16x8(v);
    }
  } else {
    for (int i = threadIdx.x; i < a.dim; i += blockDim.x) {
      const float v = RoundBf16(__bfloat162float(z[i]) * inv_rms);
      y[i] = __float2bfloat16_rn(__bfloat162float(a.weight[i]) * v);
    }
  }
}

template <bool kFused>
void Launch(const RmsNormArgs& a, bool vec, cudaStream_t stream) {
  const int threads = RmsNormThreads(vec ? a.dim / 8 : a.dim);
  void (*kernel)(RmsNormArgs) = vec ? RmsNormKernel<true, kFused> : RmsNormKernel<false, kFused>;
  TANDEM_LAUNCH(kernel, a.num_rows, threads, 0, stream, a);
}

}  // namespace

cudaError_t LaunchRmsNorm(const RmsNormArgs& a, bool fused, cudaStream_t stream) {
  if (a.num_rows == 0 || a.dim == 0) return cudaSuccess;
  bool vec = a.dim % 8 == 0 && a.x_stride % 8 == 0 && a.y_stride % 8 == 0 && Aligned16(a.x) &&
             Aligned16(a.y) && Aligned16(a.weight);
  if (fused) vec = vec && a.res_stride % 8 == 0 && Aligned16(a.residual);
  if (fused) {
    Launch<true>(a, vec, stream);
  } else {
    Launch<false>(a, vec, stream);
  }
  return cudaGetLastError();
}

}  // namespace tandem::cuda::detail
