// FP8 quantization of activations (per token or per 128-column group) and dequantization of FP8
// weights to bf16, for cuda::Fp8Linear (fp8_linear.h; launch contracts in fp8_linear_kernels.h).
//
// Activations: one warp per (row, group of 128 columns) in group mode (4 columns a lane), one CTA
// of 256 threads per row in per-token mode (8 columns, 16 bytes, at a time); the group's |max| is reduced
// across the warp (or the CTA), scale = max(amax, 1e-12) / 448, and each value is divided by the
// scale and rounded to the nearest e4m3 (saturating), the scheme of vLLM's and SGLang's dynamic
// per-token / per-token-group FP8 quantization.
//
// SwiGLU fused with it (LaunchSiluMulQuantizeFp8): the same quantization of v = bf16(silu(gate) *
// up) (silu_mul.h's rounding), computed where it is read, so that the bf16 activation [m, k] is
// never written: per 128-column group, each lane its four values once; per token, rows of up to
// 32768 columns in registers (up to 4 chunks of 8 a thread), longer ones kept in shared memory
// between the pass for the row's |max| and the quantizing pass (past 24576 columns computed
// again there).
//
// RMSNorm fused with it (LaunchRmsNormQuantizeFp8): one CTA per row with RmsNorm's threads and
// passes (rms_norm.cuh: the same sum of squares), y = RmsNorm(x) kept in registers (rows of up to
// 8192 columns: a thread a chunk) or in shared memory as bf16 and quantized from there, per token
// or per 128-column group; y is never written to memory.
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/fp8_linear_kernels.h"
#include "kernels/cuda/fp8_utils.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/silu_mul.h"

namespace tandem::cuda::detail {
namespace {

constexpr float kMinAmax = 1e-12f;

__device__ inline void QuantizeEight(const uint4& v, float inv_scale, uint8_t* dst) {
  float f[8];
  Bf16x8ToFloat(v, f);
  uint32_t lo = 0, hi = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    lo |= static_cast<uint32_t>(FloatToFp8(f[i] * inv_scale)) << (8 * i);
    hi |= static_cast<uint32_t>(FloatToFp8(f[i + 4] * inv_scale)) << (8 * i);
  }
  *reinterpret_cast<uint2*>(dst) = make_uint2(lo, hi);
}

__device__ inline float AbsMax8(const uint4& v) {
  float f[8];
  Bf16x8ToFloat(v, f);
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) m = fmaxf(m, fabsf(f[i]));
  return m;
}

// One lane's part of a 128-column group (a warp: 32 lanes x 4 columns): the group's |max| over
// the warp, its scale (returned), and, when `in`, the lane's four codes at dst.
__device__ inline float QuantizeGroupLane(const float f[4], bool in, uint8_t* dst) {
  const float amax = WarpMax(fmaxf(fmaxf(fabsf(f[0]), fabsf(f[1])), fmaxf(fabsf(f[2]), fabsf(f[3]))));
  const float scale = fmaxf(amax, kMinAmax) / kFp8Max;
  const float inv = 1.0f / scale;
  if (in) {
    uint32_t codes = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) codes |= static_cast<uint32_t>(FloatToFp8(f[i] * inv)) << (8 * i);
    *reinterpret_cast<uint32_t*>(dst) = codes;
  }
  return scale;
}

// grid (m, ceil(groups / 8)), 256 threads: warp w of CTA (r, b) takes group 8 b + w of row r, lane i
// its columns 4i .. 4i + 3 (8 bytes). Rows in grid.x: a step's tokens may pass grid.y's 65535.
__global__ void QuantizeGroupsKernel(const __nv_bfloat16* x, int64_t ldx, int k, bool k_major,
                                     int64_t ld, uint8_t* q, float* scales) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int groups = (k + 127) / 128;
  const int gi = blockIdx.y * 8 + warp;
  const int row = blockIdx.x;
  if (gi >= groups) return;
  const int col = gi * 128 + lane * 4;
  const bool in = col < k;  // k % 8 == 0: the lane's four columns are all in or all out
  float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (in) {
    const uint2 v = *reinterpret_cast<const uint2*>(x + static_cast<int64_t>(row) * ldx + col);
    const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&v.x);
    const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&v.y);
    f[0] = __low2float(lo);
    f[1] = __high2float(lo);
    f[2] = __low2float(hi);
    f[3] = __high2float(hi);
  }
  const float scale = QuantizeGroupLane(f, in, q + static_cast<int64_t>(row) * k + col);
  if (lane == 0) {
    scales[k_major ? gi * ld + row : row * ld + gi] = scale;
  }
}

// One CTA per row.
__global__ void QuantizeRowsKernel(const __nv_bfloat16* x, int64_t ldx, int k, uint8_t* q, float* scales) {
  __shared__ float scratch[32];
  const int row = blockIdx.x;
  const __nv_bfloat16* xr = x + static_cast<int64_t>(row) * ldx;
  float amax = 0.0f;
  for (int c = threadIdx.x * 8; c < k; c += blockDim.x * 8) {
    amax = fmaxf(amax, AbsMax8(*reinterpret_cast<const uint4*>(xr + c)));
  }
  amax = BlockMax(amax, scratch);
  const float scale = fmaxf(amax, kMinAmax) / kFp8Max;
  const float inv = 1.0f / scale;
  for (int c = threadIdx.x * 8; c < k; c += blockDim.x * 8) {
    QuantizeEight(*reinterpret_cast<const uint4*>(xr + c), inv, q + static_cast<int64_t>(row) * k + c);
  }
  if (threadIdx.x == 0) scales[row] = scale;
}

// v = bf16(silu(g) * u) for 8 columns (16 bytes of gate and of up), as floats.
__device__ inline void SiluMulEight(const __nv_bfloat16* g, const __nv_bfloat16* u, float* v) {
  float gv[8], uv[8];
  Bf16x8ToFloat(*reinterpret_cast<const uint4*>(g), gv);
  Bf16x8ToFloat(*reinterpret_cast<const uint4*>(u), uv);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = RoundBf16(SiluTimes(gv[i], uv[i]));
}

__device__ inline void QuantizeEightFloats(const float* f, float inv_scale, uint8_t* dst) {
  uint32_t lo = 0, hi = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    lo |= static_cast<uint32_t>(FloatToFp8(f[i] * inv_scale)) << (8 * i);
    hi |= static_cast<uint32_t>(FloatToFp8(f[i + 4] * inv_scale)) << (8 * i);
  }
  *reinterpret_cast<uint2*>(dst) = make_uint2(lo, hi);
}

// QuantizeGroupsKernel's grid and lanes over v = bf16(silu(gate) * up).
__global__ void SiluMulQuantizeGroupsKernel(SiluMulArgs a, bool k_major, int64_t ld, uint8_t* q, float* scales) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int k = a.dim;
  const int groups = (k + 127) / 128;
  const int gi = blockIdx.y * 8 + warp;
  const int row = blockIdx.x;
  if (gi >= groups) return;
  const int col = gi * 128 + lane * 4;
  const bool in = col < k;
  float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (in) {
    const uint2 gv = *reinterpret_cast<const uint2*>(a.gate + static_cast<int64_t>(row) * a.gate_stride + col);
    const uint2 uv = *reinterpret_cast<const uint2*>(a.up + static_cast<int64_t>(row) * a.up_stride + col);
    const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&gv);
    const __nv_bfloat162* u2 = reinterpret_cast<const __nv_bfloat162*>(&uv);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      f[2 * h] = RoundBf16(SiluTimes(__low2float(g2[h]), __low2float(u2[h])));
      f[2 * h + 1] = RoundBf16(SiluTimes(__high2float(g2[h]), __high2float(u2[h])));
    }
  }
  const float scale = QuantizeGroupLane(f, in, q + static_cast<int64_t>(row) * k + col);
  if (lane == 0) scales[k_major ? gi * ld + row : row * ld + gi] = scale;
}

// QuantizeRowsKernel over v = bf16(silu(gate) * up): one CTA per row. kStaged: v kept in shared
// memory (dim bf16s, dynamic) between the |max| pass and the quantizing pass; else computed again
// in the second pass (rows too long for shared memory: gate and up read twice).
template <bool kStaged>
__global__ void SiluMulQuantizeRowsKernel(SiluMulArgs a, uint8_t* q, float* scales) {
  TANDEM_DYNAMIC_SHARED(staged);
  __shared__ float scratch[32];
  const int row = blockIdx.x;
  const int k = a.dim;
  const __nv_bfloat16* g = a.gate + static_cast<int64_t>(row) * a.gate_stride;
  const __nv_bfloat16* u = a.up + static_cast<int64_t>(row) * a.up_stride;
  float amax = 0.0f;
  for (int c = threadIdx.x * 8; c < k; c += blockDim.x * 8) {
    float v[8];
    SiluMulEight(g + c, u + c, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
    if constexpr (kStaged) reinterpret_cast<uint4*>(staged)[c / 8] = FloatToBf16x8(v);
  }
  amax = BlockMax(amax, scratch);  // (its barrier also publishes the staged row)
  const float scale = fmaxf(amax, kMinAmax) / kFp8Max;
  const float inv = 1.0f / scale;
  for (int c = threadIdx.x * 8; c < k; c += blockDim.x * 8) {
    float v[8];
    if constexpr (kStaged) {
      Bf16x8ToFloat(reinterpret_cast<const uint4*>(staged)[c / 8], v);
    } else {
      SiluMulEight(g + c, u + c, v);
    }
    QuantizeEightFloats(v, inv, q + static_cast<int64_t>(row) * k + c);
  }
  if (threadIdx.x == 0) scales[row] = scale;
}

// One CTA of RmsNormThreads(dim / 8) threads per row; y staged in shared memory (dim bf16s,
// dynamic). Per token (!kGroups): the row's |max| over the CTA. Per 128-column group: after the
// row is staged, warp w takes groups w, w + warps, ..., lane i its columns 4i .. 4i + 3, as
// QuantizeGroupsKernel.
// Rows of at most 8 columns a thread (dim / 8 <= RmsNormThreads(dim / 8), dim <= 8192): the row
// stays in registers, thread c its chunk c; per group, the 16 lanes of a 128-column group reduce
// their |max| by shuffles.
template <bool kFused, bool kGroups>
__global__ void RmsNormQuantizeRegsKernel(RmsNormArgs a, int64_t ld, uint8_t* q, float* scales) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int k = a.dim, c = threadIdx.x;
  const bool in = c < k / 8;
  float w[8];
  if (in) Bf16x8ToFloat(reinterpret_cast<const uint4*>(a.weight)[c], w);
  float y[8];
  const float inv_rms = RmsNormInvRmsKeep<kFused>(a, row, scratch, y);
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    y[i] = in ? RoundBf16(w[i] * RoundBf16(y[i] * inv_rms)) : 0.0f;  // y as RmsNorm stores it
    amax = fmaxf(amax, fabsf(y[i]));
  }
  if constexpr (!kGroups) {
    amax = BlockMax(amax, scratch);
  } else {
#pragma unroll
    for (int o = 1; o < 16; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, o));
  }
  const float scale = fmaxf(amax, kMinAmax) / kFp8Max;
  if (in) QuantizeEightFloats(y, 1.0f / scale, q + row * k + 8 * c);
  if constexpr (!kGroups) {
    if (c == 0) scales[row] = scale;
  } else {
    if (in && c % 16 == 0) scales[(c / 16) * ld + row] = scale;
  }
}

template <bool kFused, bool kGroups>
__global__ void RmsNormQuantizeKernel(RmsNormArgs a, int64_t ld, uint8_t* q, float* scales) {
  TANDEM_DYNAMIC_SHARED(staged);
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int k = a.dim;
  const float inv_rms = RmsNormInvRmsVec<kFused>(a, row, scratch);
  float amax = 0.0f;
  for (int c = threadIdx.x; c < k / 8; c += blockDim.x) {
    float v[8];
    RmsNormEight<kFused>(a, row, c, inv_rms, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      v[i] = RoundBf16(v[i]);  // y as RmsNorm stores it
      amax = fmaxf(amax, fabsf(v[i]));
    }
    reinterpret_cast<uint4*>(staged)[c] = FloatToBf16x8(v);
  }
  uint8_t* qr = q + row * k;
  if constexpr (!kGroups) {
    amax = BlockMax(amax, scratch);  // (its barrier also publishes the staged row)
    const float scale = fmaxf(amax, kMinAmax) / kFp8Max;
    const float inv = 1.0f / scale;
    for (int c = threadIdx.x; c < k / 8; c += blockDim.x) {
      QuantizeEight(reinterpret_cast<const uint4*>(staged)[c], inv, qr + 8 * c);
    }
    if (threadIdx.x == 0) scales[row] = scale;
  } else {
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const __nv_bfloat16* y = reinterpret_cast<const __nv_bfloat16*>(staged);
    for (int gi = warp; gi < (k + 127) / 128; gi += warps) {
      const int col = gi * 128 + lane * 4;
      const bool in = col < k;  // k % 8 == 0: a lane's four columns are all in or all out
      float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (in) {
#pragma unroll
        for (int i = 0; i < 4; ++i) f[i] = __bfloat162float(y[col + i]);
      }
      const float scale = QuantizeGroupLane(f, in, qr + col);
      if (lane == 0) scales[gi * ld + row] = scale;
    }
  }
}

// SiluMulQuantizeRowsKernel with the row in registers: kPer 8-column chunks a thread (chunk
// threadIdx.x + j blockDim.x), every load of gate and up issued before the first use, the row's
// |max| over the CTA, the codes from the registers (rows of up to 1024 kPer chunks).
template <int kPer>
__global__ void SiluMulQuantizeRowsRegsKernel(SiluMulArgs a, uint8_t* q, float* scales) {
  __shared__ float scratch[32];
  const int row = blockIdx.x;
  const int chunks = a.dim / 8;
  const __nv_bfloat16* g = a.gate + static_cast<int64_t>(row) * a.gate_stride;
  const __nv_bfloat16* u = a.up + static_cast<int64_t>(row) * a.up_stride;
  uint4 gv[kPer], uv[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int c = threadIdx.x + j * blockDim.x;
    if (c < chunks) {
      gv[j] = reinterpret_cast<const uint4*>(g)[c];
      uv[j] = reinterpret_cast<const uint4*>(u)[c];
    }
  }
  float v[kPer][8];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int c = threadIdx.x + j * blockDim.x;
    float gf[8], uf[8];
    Bf16x8ToFloat(gv[j], gf);
    Bf16x8ToFloat(uv[j], uf);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      v[j][i] = c < chunks ? RoundBf16(SiluTimes(gf[i], uf[i])) : 0.0f;
      amax = fmaxf(amax, fabsf(v[j][i]));
    }
  }
  amax = BlockMax(amax, scratch);
  const float scale = fmaxf(amax, kMinAmax) / kFp8Max;
  const float inv = 1.0f / scale;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int c = threadIdx.x + j * blockDim.x;
    if (c < chunks) QuantizeEightFloats(v[j], inv, q + static_cast<int64_t>(row) * a.dim + 8 * c);
  }
  if (threadIdx.x == 0) scales[row] = scale;
}

// One thread per element of W (a conversion for references and the sm_89 fallback, not a hot path).
__global__ void DequantizeWeightKernel(const uint8_t* w, const float* scale, bool block, int n, int k,
                                       __nv_bfloat16* out) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
  const int64_t total = static_cast<int64_t>(n) * k;
  if (i >= total) return;
  const int row = static_cast<int>(i / k), col = static_cast<int>(i % k);
  const int kb4 = ((k + 127) / 128 + 3) / 4 * 4;  // Fp8BlockScaleCols
  const float s = block ? scale[static_cast<int64_t>(row / 128) * kb4 + col / 128] : scale[row];
  uint32_t lo, hi;
  Fp8x4ToBf16x4(w[i], lo, hi);  // element 0 of the four is the code at i
  const uint32_t bits = (lo & 0xffffu) << 16;
  float v;
  memcpy(&v, &bits, 4);
  out[i] = __float2bfloat16_rn(v * s);
}

}  // namespace

cudaError_t LaunchQuantizeFp8Activations(const __nv_bfloat16* x, int64_t ldx, int m, int k, int group,
                                         bool scales_k_major, int64_t scales_ld, uint8_t* q,
                                         float* scales, cudaStream_t stream) {
  if (m <= 0 || k <= 0) return cudaSuccess;
  if (group == 0) {
    TANDEM_LAUNCH(QuantizeRowsKernel, dim3(m), dim3(256), 0, stream, x, ldx, k, q, scales);
  } else {
    const int groups = (k + 127) / 128;
    TANDEM_LAUNCH(QuantizeGroupsKernel, dim3(m, (groups + 7) / 8), dim3(256), 0, stream, x, ldx, k,
                  scales_k_major, scales_ld, q, scales);
  }
  return cudaGetLastError();
}

cudaError_t LaunchSiluMulQuantizeFp8(const SiluMulArgs& a, int group, bool scales_k_major, int64_t scales_ld,
                                     uint8_t* q, float* scales, cudaStream_t stream) {
  if (a.num_tokens <= 0 || a.dim <= 0) return cudaSuccess;
  if (group == 0) {
    // The row in registers (up to 4 chunks a thread), else staged in shared memory when it fits the
    // default 48 KiB of a CTA.
    const int chunks = a.dim / 8;
    const int per = chunks <= 1024 ? 1 : chunks <= 2048 ? 2 : chunks <= 4096 ? 4 : 0;
    if (per > 0) {
      const int threads = RmsNormThreads((chunks + per - 1) / per);  // whole warps, 64 to 1024
      void (*kernel)(SiluMulArgs, uint8_t*, float*) = per == 1   ? SiluMulQuantizeRowsRegsKernel<1>
                                                      : per == 2 ? SiluMulQuantizeRowsRegsKernel<2>
                                                                 : SiluMulQuantizeRowsRegsKernel<4>;
      TANDEM_LAUNCH(kernel, dim3(a.num_tokens), dim3(threads), 0, stream, a, q, scales);
      return cudaGetLastError();
    }
    const size_t staged = static_cast<size_t>(a.dim) * sizeof(__nv_bfloat16);
    if (staged <= 48 * 1024) {
      TANDEM_LAUNCH(SiluMulQuantizeRowsKernel<true>, dim3(a.num_tokens), dim3(256), staged, stream, a, q, scales);
    } else {
      TANDEM_LAUNCH(SiluMulQuantizeRowsKernel<false>, dim3(a.num_tokens), dim3(256), 0, stream, a, q, scales);
    }
  } else {
    const int groups = (a.dim + 127) / 128;
    TANDEM_LAUNCH(SiluMulQuantizeGroupsKernel, dim3(a.num_tokens, (groups + 7) / 8), dim3(256), 0, stream, a,
                  scales_k_major, scales_ld, q, scales);
  }
  return cudaGetLastError();
}

cudaError_t LaunchRmsNormQuantizeFp8(const RmsNormArgs& a, bool fused, int group, int64_t scales_ld, uint8_t* q,
                                     float* scales, cudaStream_t stream) {
  if (a.num_rows <= 0 || a.dim <= 0) return cudaSuccess;
  if (a.dim > kRmsNormQuantizeMaxDim) return cudaErrorInvalidValue;
  const size_t staged = static_cast<size_t>(a.dim) * sizeof(__nv_bfloat16);
  const int threads = RmsNormThreads(a.dim / 8);
  using Kernel = void (*)(RmsNormArgs, int64_t, uint8_t*, float*);
  if (a.dim / 8 <= threads) {
    const Kernel kernel =
        fused ? (group == 0 ? RmsNormQuantizeRegsKernel<true, false> : RmsNormQuantizeRegsKernel<true, true>)
              : (group == 0 ? RmsNormQuantizeRegsKernel<false, false> : RmsNormQuantizeRegsKernel<false, true>);
    TANDEM_LAUNCH(kernel, dim3(a.num_rows), dim3(threads), 0, stream, a, scales_ld, q, scales);
    return cudaGetLastError();
  }
  const Kernel kernel =
      fused ? (group == 0 ? RmsNormQuantizeKernel<true, false> : RmsNormQuantizeKernel<true, true>)
            : (group == 0 ? RmsNormQuantizeKernel<false, false> : RmsNormQuantizeKernel<false, true>);
  TANDEM_LAUNCH(kernel, dim3(a.num_rows), dim3(threads), staged, stream, a, scales_ld, q, scales);
  return cudaGetLastError();
}

cudaError_t LaunchDequantizeFp8Weight(const uint8_t* w, const float* scale, bool block, int n, int k,
                                      __nv_bfloat16* out, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * k;
  if (total == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>((total + 255) / 256);
  TANDEM_LAUNCH(DequantizeWeightKernel, dim3(blocks), dim3(256), 0, stream, w, scale, block, n, k, out);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::detail
