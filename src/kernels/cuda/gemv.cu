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
//
// Fusions (GemvFusion, gemv.h; m <= 8, bf16 out): the x operand is transformed as it is loaded
// (RMSNorm with the row's inverse rms, or SiLU*mul with the up half), and the epilogue may add the
// rounded product to y (the residual add). The norm's inverse rms is reduced by every CTA from the
// m rows (8 KB a row at hidden 4096, from L2) in RmsNorm's order, after the grid-dependency wait.
#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/mma_utils.cuh"
#include "kernels/cuda/rms_norm.h"

namespace tandem::cuda::detail {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kTileRows = 16;
constexpr int kStepCols = 32;

#ifdef TANDEM_CUDA_EMU
__device__ inline uint4 LoadStream(const __nv_bfloat16* p) {
  if (!Aligned16(p)) std::abort();
  return *reinterpret_cast<const uint4*>(p);
}
__device__ inline uint4 LoadCached(const __nv_bfloat16* p) {
  if (!Aligned16(p)) std::abort();
  return *reinterpret_cast<const uint4*>(p);
}
#else
// Read-only, not kept in L1, L2 fetches 256 bytes around the address.
__device__ inline uint4 LoadStream(const __nv_bfloat16* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}
__device__ inline uint4 LoadCached(const __nv_bfloat16* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}
#endif

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
  // Fusions (GemvFusion): the norm's weight, eps and RmsNorm's block size; the up half.
  const __nv_bfloat16* norm_w;
  float norm_eps;
  int norm_threads;
  const __nv_bfloat16* up;
};

// The x operand's transform (Pro) and the epilogue's residual add (Acc) of a fused launch.
constexpr int kProNone = 0;
constexpr int kProNorm = 1;
constexpr int kProSilu = 2;

// Per-row inverse rms of the m rows of x into inv_rms[], in RmsNormKernel's order: virtual thread
// c of its block (RmsNormThreads(k) threads, k / 8 <= that) sums the squares of the 8 elements of
// 16-byte load c, each virtual warp's sums meet in WarpSum, then one WarpSum over the warp sums
// (zeros past the last warp). The (row, virtual warp) pairs are spread over this CTA's warps, two
// loads in flight per lane (the slice's first W steps are held in registers meanwhile).
__device__ void GemvRowInvRms(const GemvParams& p, float (*sq)[32], float* inv_rms) {
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int vwarps = p.norm_threads / 32;
  const int vec = p.k / 8;
  const int pairs = p.m * vwarps;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int q0 = warp; q0 < pairs; q0 += 2 * kWarps) {
    uint4 v[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int q = q0 + i * kWarps;
      const int c = (q % vwarps) * 32 + lane;
      v[i] = q < pairs && c < vec ? LoadCached(p.x + static_cast<int64_t>(q / vwarps) * p.ldx + 8 * c)
                                  : zero;
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int q = q0 + i * kWarps;
      if (q >= pairs) break;  // warp-uniform
      float f[8];
      Bf16x8ToFloat(v[i], f);
      float sum_sq = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) sum_sq += f[e] * f[e];
      sum_sq = WarpSum(sum_sq);
      if (lane == 0) sq[q / vwarps][q % vwarps] = sum_sq;
    }
  }
  __syncthreads();
  if (warp == 0) {
    for (int j = 0; j < p.m; ++j) {
      float total = lane < vwarps ? sq[j][lane] : 0.0f;
      total = WarpSum(total);
      if (lane == 0) inv_rms[j] = 1.0f / sqrtf(total / static_cast<float>(p.k) + p.norm_eps);
    }
  }
  __syncthreads();
}

// 16 bytes of x row (xr) at `col`, transformed for Pro: normalized with inv_rms and the norm's
// weight (nw, offset as xr), or SiLU(gate) * up (ur, offset as xr).
template <int Pro>
__device__ inline uint4 LoadX(const __nv_bfloat16* xr, const __nv_bfloat16* nw,
                              const __nv_bfloat16* ur, float inv_rms, int col) {
  uint4 v = LoadCached(xr + col);
  if constexpr (Pro == kProNorm) {
    float f[8], w[8];
    Bf16x8ToFloat(v, f);
    Bf16x8ToFloat(LoadCached(nw + col), w);
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = w[e] * RoundBf16(f[e] * inv_rms);
    v = FloatToBf16x8(f);
  } else if constexpr (Pro == kProSilu) {
    float g[8], u[8];
    Bf16x8ToFloat(v, g);
    Bf16x8ToFloat(LoadCached(ur + col), u);
#pragma unroll
    for (int e = 0; e < 8; ++e) g[e] = SiluTimes(g[e], u[e]);
    v = FloatToBf16x8(g);
  }
  return v;
}

// NT: 8-row tiles of x (m <= 8 * NT); U: k steps loaded at once; OutT: __nv_bfloat16 or float.
// grid.x = ceil(ceil(n / 16) / (8 / KS)).
// CTAs per SM the registers are sized for: 3 (<= 85 registers) for one x tile, 2 with two, and 2
// with the SiLU transform (its expf per element of U steps of x does not fit in 85; down at
// Qwen3-8B's shape is 256 CTAs, one wave at 2 per SM).
template <int NT, int Pro>
constexpr int GemvMinBlocks() {
  return NT == 1 && Pro != kProSilu ? 3 : 2;
}

template <int NT, int U, typename OutT, int Pro, bool Acc>
__global__ void __launch_bounds__(kThreads, GemvMinBlocks<NT, Pro>()) GemvKernel(GemvParams p) {
  static_assert(Pro == kProNone || NT == 1, "fused x transforms: m <= 8");
  static_assert(!Acc || sizeof(OutT) == 2, "the residual add: bf16 out");
  // A GEMV launched programmatically after this one may start fetching its weights now (all of
  // this grid's CTAs are resident or done by then); it reads this one's output after its wait.
  TriggerDependents();
  __shared__ float partial[kWarps][4 * NT][32];
  __shared__ float norm_sq[Pro == kProNorm ? kGemvFusedMaxRows : 1][32];
  __shared__ float inv_rms[Pro == kProNorm ? kGemvFusedMaxRows : 1];
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
  const __nv_bfloat16* ur[NT];
  bool ok_x[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    ok_x[j] = g + 8 * j < p.m;
    const int64_t off = (ok_x[j] ? static_cast<int64_t>(g + 8 * j) * p.ldx : 0) + 8 * t;
    xr[j] = p.x + off;
    ur[j] = Pro == kProSilu ? p.up + off : nullptr;
  }
  const __nv_bfloat16* nw = Pro == kProNorm ? p.norm_w + 8 * t : nullptr;
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
  float row_inv_rms = 0.0f;  // x row g's (the norm fusion)
  if constexpr (Pro == kProNorm) {
    GemvRowInvRms(p, norm_sq, inv_rms);
    row_inv_rms = ok_x[0] ? inv_rms[g] : 0.0f;
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
      for (int j = 0; j < NT; ++j) {
        vx[j][u] = in && ok_x[j] ? LoadX<Pro>(xr[j], nw, ur[j], row_inv_rms, col) : zero;
      }
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
        if constexpr (Acc) v = RoundBf16(v) + __bfloat162float(*dst);
        *dst = __float2bfloat16_rn(v);
      } else {
        *dst = v;
      }
    }
  }
}

template <int NT, int U, typename OutT, int Pro = kProNone, bool Acc = false>
cudaError_t Launch(const GemvParams& p, cudaStream_t stream) {
  const int tiles = (p.n + kTileRows - 1) / kTileRows;
  const int tiles_per_cta = kWarps / p.k_split;
  const unsigned grid = static_cast<unsigned>((tiles + tiles_per_cta - 1) / tiles_per_cta);
  auto kernel = GemvKernel<NT, U, OutT, Pro, Acc>;
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

namespace {

// The L2 look-ahead: 0 unless TANDEM_GEMV_PDL_L2 says (a whole slice of every resident CTA can
// exceed L2 and be read twice).
int PdlL2Steps() {
  static const int l2_steps = [] {
    const char* v = std::getenv("TANDEM_GEMV_PDL_L2");
    return v != nullptr ? std::max(0, std::atoi(v)) : 0;
  }();
  return l2_steps;
}

GemvParams Params(const LinearArgs& a, int k_split) {
  return GemvParams{a.x, a.ldx, a.w, a.bias, a.y, a.ldy, a.m, a.n, a.k, k_split, a.programmatic_launch,
                    PdlL2Steps(), nullptr, 0.0f, 0, nullptr};
}

bool ValidSplit(int k_split) { return k_split == 1 || k_split == 2 || k_split == 4 || k_split == 8; }

}  // namespace

cudaError_t LaunchGemv(const LinearArgs& a, int k_split, cudaStream_t stream) {
  if (!GemvSupported(a) || !ValidSplit(k_split)) return cudaErrorInvalidValue;
  const GemvParams p = Params(a, k_split);
  const bool f32 = a.out_dtype == OutDtype::kFloat32;
  if (a.m <= 8) {
    return f32 ? Launch<1, 4, float>(p, stream) : Launch<1, 4, __nv_bfloat16>(p, stream);
  }
  return f32 ? Launch<2, 4, float>(p, stream) : Launch<2, 4, __nv_bfloat16>(p, stream);
}

bool GemvFusionSupported(const LinearArgs& a, const GemvFusion& f) {
  if (!GemvSupported(a) || a.m > kGemvFusedMaxRows || a.out_dtype != OutDtype::kBf16) return false;
  if (f.norm_weight != nullptr && f.up != nullptr) return false;
  if (f.norm_weight != nullptr && (a.k > kGemvFusedNormMaxK || !Aligned16(f.norm_weight))) return false;
  if (f.up != nullptr && !Aligned16(f.up)) return false;
  return true;
}

cudaError_t LaunchGemvFused(const LinearArgs& a, const GemvFusion& f, int k_split, cudaStream_t stream) {
  if (!GemvFusionSupported(a, f) || !ValidSplit(k_split)) return cudaErrorInvalidValue;
  GemvParams p = Params(a, k_split);
  using bf16 = __nv_bfloat16;
  if (f.norm_weight != nullptr) {
    p.norm_w = f.norm_weight;
    p.norm_eps = f.norm_eps;
    p.norm_threads = RmsNormThreads(a.k, true);
    return f.accumulate ? Launch<1, 4, bf16, kProNorm, true>(p, stream)
                        : Launch<1, 4, bf16, kProNorm, false>(p, stream);
  }
  if (f.up != nullptr) {
    p.up = f.up;
    return f.accumulate ? Launch<1, 4, bf16, kProSilu, true>(p, stream)
                        : Launch<1, 4, bf16, kProSilu, false>(p, stream);
  }
  return f.accumulate ? Launch<1, 4, bf16, kProNone, true>(p, stream)
                      : Launch<1, 4, bf16, kProNone, false>(p, stream);
}

}  // namespace tandem::cuda::detail
