// Skinny GEMM (m <= 16) with FP8 E4M3 weights for cuda::Fp8Linear; shapes, scales and
// requirements in fp8_linear.h. The bf16 kernel of gemv.cu with the weight bytes halved:
//
// Layout. As gemv.cu: a CTA has 8 warps = (8 / KS) tiles of 16 rows of W x KS slices of k; lane
// 4g + t owns W rows row0 + g and row0 + g + 8 and x row g (and g + 8 when m > 8). One k step is 64
// columns: the lane loads the 16 codes at columns 64 s + 16 t .. 64 s + 16 t + 15 of each of its two
// W rows (one 16-byte load), converts them exactly to bf16 (fp8_utils.cuh), loads the same 16
// columns of its x row(s) (two 16-byte loads) and feeds four mma.m16n8k16: mma q takes the words
// 2q, 2q + 1 of W and of x, which in the PTX fragment layout stand for the same logical columns in
// A and B, so every physical column meets its own x column once (the argument of gemv.cu).
// Scales. Per output channel: the fp32 sums are multiplied by the row's scale once at the end. In
// 128 x 128 blocks: a step's 64 columns lie inside one block column (64 divides 128), and a tile's
// 16 rows inside one block row (128 / 16 tiles), so the step's products go to a fresh accumulator
// that is added times the block's scale: one FMA per accumulator and step.
#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/fp8_linear_kernels.h"
#include "kernels/cuda/fp8_utils.cuh"
#include "kernels/cuda/mma_utils.cuh"

namespace tandem::cuda::detail {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kTileRows = 16;
constexpr int kStepCols = 64;


// NT: 8-row tiles of x (m <= 8 NT); U: k steps per batch of loads (two batches in flight); BLOCK: 128 x 128 block scales
// (else per channel); OutT: __nv_bfloat16 or float. grid.x = ceil(ceil(n / 16) / (8 / KS)).
template <int NT, int U, bool BLOCK, typename OutT>
__global__ void __launch_bounds__(kThreads, U <= 2 && NT == 1 ? 3 : 2) Fp8GemvKernel(Fp8GemvParams p) {
  __shared__ float partial[kWarps][4 * NT][32];
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int ks = warp % p.k_split;
  const int tile = blockIdx.x * (kWarps / p.k_split) + warp / p.k_split;
  const int row_a = tile * kTileRows + g;
  const int row_b = row_a + 8;
  const bool ok_a = row_a < p.n;
  const bool ok_b = row_b < p.n;
  const uint8_t* wa = p.w + (ok_a ? static_cast<int64_t>(row_a) * p.k : 0) + 16 * t;
  const uint8_t* wb = p.w + (ok_b ? static_cast<int64_t>(row_b) * p.k : 0) + 16 * t;
  const __nv_bfloat16* xr[NT];
  bool ok_x[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    ok_x[j] = g + 8 * j < p.m;
    xr[j] = p.x + (ok_x[j] ? static_cast<int64_t>(g + 8 * j) * p.ldx : 0) + 16 * t;
  }
  const int steps = (p.k + kStepCols - 1) / kStepCols;
  const int s_begin = static_cast<int>(static_cast<int64_t>(steps) * ks / p.k_split);
  const int s_end = static_cast<int>(static_cast<int64_t>(steps) * (ks + 1) / p.k_split);
  const int k_lane = p.k - 16 * t;  // the lane's 16 columns of a step exist when col < k_lane
  // Block scales: this tile's block row (its 16 rows share it; rows past n use the last one).
  const float* scale_row = nullptr;
  if constexpr (BLOCK) {
    const int kb4 = ((p.k + 127) / 128 + 3) / 4 * 4;  // Fp8BlockScaleCols
    scale_row = p.scale + static_cast<int64_t>(min(tile * kTileRows, p.n - 1) / 128) * kb4;
  }

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f;
  }
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // Batches of U steps, double-buffered: batch b + 1's W loads go out before batch b is converted
  // and multiplied, so one batch is always in flight; x (L1-resident) is read step by step.
  uint4 va[U], vb[U], na[U], nb[U];
  auto load_w = [&](int s, uint4* a, uint4* b) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int col = (s + u) * kStepCols;
      const bool in = s + u < s_end && col < k_lane;
      a[u] = in && ok_a ? LoadStream(wa + col) : zero;
      b[u] = in && ok_b ? LoadStream(wb + col) : zero;
    }
  };
  load_w(s_begin, va, vb);
  if (p.pdl) GridDependencyWait();
  for (int s = s_begin; s < s_end; s += U) {
    if (s + U < s_end) load_w(s + U, na, nb);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int col = (s + u) * kStepCols;
      const bool in = s + u < s_end && col < k_lane;
      uint4 vx[NT][2];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        vx[j][0] = in && ok_x[j] ? LoadCached(xr[j] + col) : zero;
        vx[j][1] = in && ok_x[j] ? LoadCached(xr[j] + col + 8) : zero;
      }
      uint32_t a[8], b[8];
      Fp8x16ToBf16x16(va[u], a);
      Fp8x16ToBf16x16(vb[u], b);
      float step_acc[NT][4];
      float(*target)[4] = acc;
      if constexpr (BLOCK) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
          for (int i = 0; i < 4; ++i) step_acc[j][i] = 0.0f;
        }
        target = step_acc;
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint32_t af[4] = {a[2 * q], b[2 * q], a[2 * q + 1], b[2 * q + 1]};
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const uint32_t* xw = reinterpret_cast<const uint32_t*>(&vx[j][q >> 1]);
          const uint32_t bf[2] = {xw[2 * (q & 1)], xw[2 * (q & 1) + 1]};
          MmaBf16(target[j], af, bf);
        }
      }
      if constexpr (BLOCK) {
        // Steps past the slice (or k) added zeros; their scale index may be out of range.
        const float sc = s + u < s_end ? scale_row[col / 128] : 0.0f;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[j][i] = fmaf(step_acc[j][i], sc, acc[j][i]);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      va[u] = na[u];
      vb[u] = nb[u];
    }
  }

  if (p.k_split > 1) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[warp][4 * j + i][lane] = acc[j][i];
    }
    __syncthreads();
    if (ks != 0) return;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float sum = partial[warp][4 * j + i][lane];
        for (int q = 1; q < p.k_split; ++q) sum += partial[warp + q][4 * j + i][lane];
        acc[j][i] = sum;
      }
    }
  }
  // acc[j][i]: W row (i < 2 ? row_a : row_b), x row 8j + 2t + (i & 1).
  OutT* y = static_cast<OutT*>(p.y);
  float row_scale[2] = {1.0f, 1.0f};
  if constexpr (!BLOCK) {
    if (ok_a) row_scale[0] = p.scale[row_a];
    if (ok_b) row_scale[1] = p.scale[row_b];
  }
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = i < 2 ? row_a : row_b;
      const int xrow = 8 * j + 2 * t + (i & 1);
      if (row >= p.n || xrow >= p.m) continue;
      float v = acc[j][i] * row_scale[i >> 1];
      if (p.bias != nullptr) v += __bfloat162float(p.bias[row]);
      OutT* dst = y + static_cast<int64_t>(xrow) * p.ldy + row;
      if constexpr (sizeof(OutT) == 2) {
        *dst = __float2bfloat16_rn(v);
      } else {
        *dst = v;
      }
    }
  }
}

template <int NT, int U, bool BLOCK, typename OutT>
cudaError_t Launch(const Fp8GemvParams& p, cudaStream_t stream) {
  const int tiles = (p.n + kTileRows - 1) / kTileRows;
  const int tiles_per_cta = kWarps / p.k_split;
  const unsigned grid = static_cast<unsigned>((tiles + tiles_per_cta - 1) / tiles_per_cta);
  auto kernel = Fp8GemvKernel<NT, U, BLOCK, OutT>;
  TANDEM_LAUNCH_PDL(kernel, dim3(grid), dim3(kThreads), 0, stream, p.pdl, p);
  return cudaGetLastError();
}

template <int U, bool BLOCK>
cudaError_t LaunchScaled(const Fp8GemvParams& p, bool f32, cudaStream_t stream) {
  if (p.m <= 8) {
    return f32 ? Launch<1, U, BLOCK, float>(p, stream) : Launch<1, U, BLOCK, __nv_bfloat16>(p, stream);
  }
  return f32 ? Launch<2, U, BLOCK, float>(p, stream) : Launch<2, U, BLOCK, __nv_bfloat16>(p, stream);
}

// Steps per batch: 2 (3 CTAs per SM for m <= 8), or 4 with TANDEM_FP8_GEMV_STEPS=4 (2 CTAs).
int StepsPerBatch() {
  static const int u = [] {
    const char* v = std::getenv("TANDEM_FP8_GEMV_STEPS");
    return v != nullptr && std::atoi(v) == 4 ? 4 : 2;
  }();
  return u;
}

}  // namespace

cudaError_t LaunchFp8Gemv(const Fp8GemvParams& p, bool f32_out, cudaStream_t stream) {
  if (p.k_split != 1 && p.k_split != 2 && p.k_split != 4 && p.k_split != 8) return cudaErrorInvalidValue;
  if (StepsPerBatch() == 4) {
    return p.block ? LaunchScaled<4, true>(p, f32_out, stream) : LaunchScaled<4, false>(p, f32_out, stream);
  }
  return p.block ? LaunchScaled<2, true>(p, f32_out, stream) : LaunchScaled<2, false>(p, f32_out, stream);
}

}  // namespace tandem::cuda::detail
