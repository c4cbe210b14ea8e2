// Skinny GEMM kernel (m <= 16) for cuda::Linear; shapes, numerics and requirements in gemv.h.
//
// Layout. A CTA has 8 warps = (8 / KS) tiles of 16 rows of W x KS slices of k. In a warp, lane
// 4g + t owns W rows row0 + g and row0 + g + 8 and x row g (and g + 8 when m > 8). One k step is 32
// columns: the lane loads the 16 bytes at columns 32 s + 8t .. 32 s + 8t + 7 of its two W rows and
// of its x row(s), and feeds two mma.m16n8k16 with them:
//   mma 0: A = {Wg.x, Wg8.x, Wg.y, Wg8.y}, B = {x.x, x.y};  mma 1: the .z/.w words.
// In the PTX fragment layout (mma_utils.cuh) the lane's words .x/.y then stand for logical
// columns 2t, 2t+1 / 2t+8, 2t+9 in both A and B, so every physical column of the step meets its
// own x column exactly once: the dot products are exact permutations of k. D[row][col] is
// y[col][row] (col = the x row), accumulated in fp32 across the steps of the slice.
//
// Memory: W is streamed with ld.global.nc.L1::no_allocate.L2::256B (no L1 pollution; the four
// lanes of a row read 64 contiguous bytes per step and U steps back to back cover 256 bytes),
// x through L1 (__ldg; all warps of the SM read the same few KB). U steps are loaded before any
// mma (2U + NT U 16-byte loads in flight per lane). The KS partial sums of a tile meet in shared
// memory and warp 0 of the tile adds them in slice order (deterministic), adds the bias in fp32 and
// rounds once.
#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/mma_utils.cuh"

namespace tandem::cuda::detail {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kTileRows = 16;
constexpr int kStepCols = 32;


struct GemvParams {
  const __nv_bfloat16* x;
  int64_t ldx;
  const __nv_bfloat16* w;
  const __nv_bfloat16* bias;
  void* y;
  int64_t ldy;
  int m, n, k;
  int k_split;  // KS: 1, 2, 4 or 8
  bool pdl;     // launched programmatically (LinearArgs::programmatic_launch)
  int l2_steps; // with pdl: k steps past the first U asked into L2 before the wait
};

// NT: 8-row tiles of x (m <= 8 * NT); U: k steps loaded at once; OutT: __nv_bfloat16 or float.
// grid.x = ceil(ceil(n / 16) / (8 / KS)).
template <int NT, int U, typename OutT>
__global__ void __launch_bounds__(kThreads, NT == 1 ? 3 : 2) GemvKernel(GemvParams p) {
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
  // Pointers only formed for rows that exist (row 0 stands in for the others, never read).
  const __nv_bfloat16* wa = p.w + (ok_a ? static_cast<int64_t>(row_a) * p.k : 0) + 8 * t;
  const __nv_bfloat16* wb = p.w + (ok_b ? static_cast<int64_t>(row_b) * p.k : 0) + 8 * t;
  const __nv_bfloat16* xr[NT];
  bool ok_x[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    ok_x[j] = g + 8 * j < p.m;
    xr[j] = p.x + (ok_x[j] ? static_cast<int64_t>(g + 8 * j) * p.ldx : 0) + 8 * t;
  }
  // This warp's slice of the k steps (warp-uniform bounds: every lane runs every mma).
  const int steps = (p.k + kStepCols - 1) / kStepCols;
  const int s_begin = static_cast<int>(static_cast<int64_t>(steps) * ks / p.k_split);
  const int s_end = static_cast<int>(static_cast<int64_t>(steps) * (ks + 1) / p.k_split);
  const int k_lane = p.k - 8 * t;  // columns this lane may read from its step offset: c < k_lane

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f;
  }
  const uint4 zero = make_uint4(0, 0, 0, 0);
  uint4 va[U], vb[U];
  // The slice's first U steps of W. Launched programmatically, the previous kernel may still be
  // running: W does not depend on it, so these loads and an L2 prefetch of the rest of the slice
  // go out first (lane t takes the 128-byte lines t, t + 4, ... of its two rows), and x, which
  // that kernel writes, is read only after the wait.
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int col = (s_begin + u) * kStepCols;
    const bool in = s_begin + u < s_end && col < k_lane;
    va[u] = in && ok_a ? LoadStream(wa + col) : zero;
    vb[u] = in && ok_b ? LoadStream(wb + col) : zero;
  }
  if (p.pdl) {
    const int c_end = min(min(s_end, s_begin + U + p.l2_steps) * kStepCols, p.k);
    for (int c = (s_begin + U) * kStepCols + 64 * t; c < c_end; c += 256) {
      if (ok_a) PrefetchL2(wa - 8 * t + c);
      if (ok_b) PrefetchL2(wb - 8 * t + c);
    }
    GridDependencyWait();
  }
  for (int s = s_begin; s < s_end; s += U) {
    uint4 vx[NT][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int col = (s + u) * kStepCols;
      const bool in = s + u < s_end && col < k_lane;
      if (s != s_begin) {
        va[u] = in && ok_a ? LoadStream(wa + col) : zero;
        vb[u] = in && ok_b ? LoadStream(wb + col) : zero;
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) vx[j][u] = in && ok_x[j] ? LoadCached(xr[j] + col) : zero;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint32_t a0[4] = {va[u].x, vb[u].x, va[u].y, vb[u].y};
      const uint32_t a1[4] = {va[u].z, vb[u].z, va[u].w, vb[u].w};
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const uint32_t b0[2] = {vx[j][u].x, vx[j][u].y};
        const uint32_t b1[2] = {vx[j][u].z, vx[j][u].w};
        MmaBf16(acc[j], a0, b0);
        MmaBf16(acc[j], a1, b1);
      }
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
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = i < 2 ? row_a : row_b;
      const int xrow = 8 * j + 2 * t + (i & 1);
      if (row >= p.n || xrow >= p.m) continue;
      float v = acc[j][i];
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

template <int NT, int U, typename OutT>
cudaError_t Launch(const GemvParams& p, cudaStream_t stream) {
  const int tiles = (p.n + kTileRows - 1) / kTileRows;
  const int tiles_per_cta = kWarps / p.k_split;
  const unsigned grid = static_cast<unsigned>((tiles + tiles_per_cta - 1) / tiles_per_cta);
  auto kernel = GemvKernel<NT, U, OutT>;
  TANDEM_LAUNCH_PDL(kernel, dim3(grid), dim3(kThreads), 0, stream, p.pdl, p);
  return cudaGetLastError();
}

}  // namespace

int GemvAutoSplit(int n, int k, int num_sms) {
  const int64_t tiles = (n + kTileRows - 1) / kTileRows;
  const int64_t target_warps = static_cast<int64_t>(num_sms > 0 ? num_sms : 1) * 24;
  int ks = 1;
  while (ks < kWarps && tiles * ks < target_warps && k / (2 * ks) >= 256) ks *= 2;
  return ks;
}

bool GemvSupported(const LinearArgs& a) {
  return a.m >= 1 && a.m <= kGemvMaxRows && a.n >= 1 && a.k >= 8 && a.k % 8 == 0 &&
         a.ldx % 8 == 0 && a.ldx >= a.k && a.ldy >= a.n && a.x != nullptr && a.w != nullptr &&
         a.y != nullptr && Aligned16(a.x) && Aligned16(a.w);
}

cudaError_t LaunchGemv(const LinearArgs& a, int k_split, cudaStream_t stream) {
  if (!GemvSupported(a) || (k_split != 1 && k_split != 2 && k_split != 4 && k_split != 8)) {
    return cudaErrorInvalidValue;
  }
  // The L2 look-ahead: 0 unless TANDEM_GEMV_PDL_L2 says (a whole slice of every resident CTA can
  // exceed L2 and be read twice).
  static const int l2_steps = [] {
    const char* v = std::getenv("TANDEM_GEMV_PDL_L2");
    return v != nullptr ? std::max(0, std::atoi(v)) : 0;
  }();
  const GemvParams p{a.x, a.ldx, a.w, a.bias, a.y, a.ldy, a.m, a.n, a.k, k_split, a.programmatic_launch,
                     l2_steps};
  const bool f32 = a.out_dtype == OutDtype::kFloat32;
  if (a.m <= 8) {
    return f32 ? Launch<1, 4, float>(p, stream) : Launch<1, 4, __nv_bfloat16>(p, stream);
  }
  return f32 ? Launch<2, 4, float>(p, stream) : Launch<2, 4, __nv_bfloat16>(p, stream);
}

}  // namespace tandem::cuda::detail
