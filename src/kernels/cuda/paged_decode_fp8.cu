// PagedDecode over an FP8 E4M3 pool on the tensor cores, with the MMA fragments of K and V made
// straight from the codes in registers (paged_attention.h, PagedDecodeArgs::kv_pool_fp8; the
// default FP8 kernel; DecodeKernel::kMmaFp8Tile runs the earlier one of paged_decode_mma.cu, which
// converts each landed tile to an f16 tile in shared memory and reads it back with ldmatrix).
//
// The grid, warps, cp.async ring, online softmax and the CTA's end are paged_decode_mma.cu's
// (the query heads of one KV head are the rows of m16n8k16 f16 MMAs; Q is converted to f16 once,
// P rounded to f16). What differs is how the codes become fragments (mma_utils.cuh gives the
// layouts; g = lane / 4, t = lane % 4):
// - S = Q K^T. A dot product does not depend on the order of its terms, so k-step kk's 16 MMA
//   columns are dims that suit the codes: thread t's columns {2t, 2t+1, 2t+8, 2t+9} are the four
//   adjacent dims 64 h + 16 t + 4 e + {0, 1, 2, 3} (kk = 4 h + e), one 32-bit word of codes. One
//   16-byte load of key row 8 j + g at dims 64 h + 16 t gives B fragments of 4 k-steps (two
//   cvt.rn.f16x2.e4m3x2 a word); Q's A fragments are read with the same permutation.
// - O += P V. V's B fragment wants two keys of one dim in a register, the codes hold a row's dims
//   side by side, and FP8 has no transposing ldmatrix: thread g reads dims [HD / 8 g, HD / 8 (g + 1))
//   of keys 2t, 2t+1, 2t+8, 2t+9 (one 16-byte load each at head_dim 128), and one PRMT pairs the
//   two keys' bytes of two dims. Output column g of n8 tile j = 4 q + r is dim HD / 8 g + 4 q + r,
//   undone when the warp writes its result.
// No converted tile, ldmatrix or __syncwarp per tile: 8 16-byte shared loads a lane a tile at
// head_dim 128 where the tile kernel had 8 loads, 8 stores and 16 ldmatrix. The codes are swizzled
// in 16-byte chunks as they land (K: chunk c of row r at c ^ 4 (r & 1); V: at c ^ 2 ((r / 2) & 3)),
// so that each quarter warp's loads touch 32 different banks. Shared memory at head_dim 128: Q
// 4.25 KiB + 4 warps x kRing stages x 4 KiB: 68.25 KiB at 4 stages (the default: three CTAs an
// SM), 52.25 KiB at 3 (four CTAs, but 128 registers a thread spill: slower on the H200).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/fp8_utils.cuh"
#include "kernels/cuda/paged_decode_mma.cuh"

namespace tandem::cuda::detail {
namespace decode {
namespace {

constexpr int kTile = 16;  // keys per warp tile

template <int HD, int kRing>
struct Fp8Smem {
  static constexpr int kLdQ = HD + 8;                // bf16 elements per row of Q
  static constexpr size_t kStageBytes = 2 * kTile * HD;  // K then V codes
  static constexpr size_t kQ = 0;
  static constexpr size_t kKV = sizeof(__nv_bfloat16) * 16 * kLdQ;
  // A warp's region: its ring; after the loop its 16 x HD fp32 output, and the four regions
  // MergeSplits' 2 * 16 * kPagedDecodeMaxSplits floats.
  static constexpr size_t kMergeBytes = sizeof(float) * 2 * 16 * kPagedDecodeMaxSplits / kWarps;
  static constexpr size_t kWarpBytes =
      std::max({kRing * kStageBytes, sizeof(float) * 16 * HD, kMergeBytes});
  static constexpr size_t kBytes = kKV + kWarps * kWarpBytes;
  static_assert(kKV % 16 == 0 && kWarpBytes % 16 == 0);
};

// 16-byte chunk c of row r's codes -> its chunk in the stage (head_dim 128; 64 unswizzled).
template <int HD>
__device__ inline int SwizzleK(int r, int c) {
  return HD == 128 ? c ^ ((r & 1) << 2) : c;
}
template <int HD>
__device__ inline int SwizzleV(int r, int c) {
  return HD == 128 ? c ^ (((r >> 1) & 3) << 1) : c;
}

// HD / 8 bytes of a row of codes (16 at head_dim 128, 8 at 64) as HD / 32 words.
template <int HD>
struct RowPart {
  uint32_t w[HD / 32];
};
template <int HD>
__device__ inline RowPart<HD> LoadPart(const uint8_t* p) {
  RowPart<HD> v;
  if constexpr (HD == 128) {
    const uint4 x = *reinterpret_cast<const uint4*>(p);
    v.w[0] = x.x, v.w[1] = x.y, v.w[2] = x.z, v.w[3] = x.w;
  } else {
    const uint2 x = *reinterpret_cast<const uint2*>(p);
    v.w[0] = x.x, v.w[1] = x.y;
  }
  return v;
}

template <int HD, int kRing, bool kHiRows>
__global__ void __launch_bounds__(kThreads, kRing == 3 ? 4 : 3)
    PagedDecodeFp8Kernel(PagedDecodeArgs a, Workspace ws) {
  TriggerDependents();  // see paged_decode_mma.cu
  using L = Fp8Smem<HD, kRing>;
  constexpr int kChunks = HD / 16;  // 16-byte chunks of a row of codes
  constexpr int kKSteps = HD / 16;
  constexpr int kDTiles = HD / 8;   // n8 tiles of O
  constexpr int kPart = HD / 8;     // bytes of a V row a lane reads
  TANDEM_DYNAMIC_SHARED(smem);
  __shared__ float s_m[kWarps][16], s_l[kWarps][16];
  __shared__ unsigned s_ticket;
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem + L::kQ);

  const int seq = blockIdx.z, kvh = blockIdx.y, split = blockIdx.x;
  const int group = a.num_heads / a.num_kv_heads;  // <= 16 (<= 8 unless kHiRows)
  const int h0 = kvh * group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  int start = 0, end = 0, used = 0;
  if (!CtaChunk<HD>(a, ws, seq, split, h0, group, &start, &end, &used)) return;
  const int num_tiles = (end - start + kTile - 1) / kTile;
  const int my_tiles = warp < num_tiles ? (num_tiles - warp + kWarps - 1) / kWarps : 0;
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.block_table_stride;
  const int64_t row_elems = static_cast<int64_t>(a.num_kv_heads) * HD;
  const int64_t v_shift = static_cast<int64_t>(a.block_size) * row_elems;
  uint8_t* ring = smem + L::kKV + warp * L::kWarpBytes;
  float scale = a.scale, v_scale = 1.0f;
  if (a.k_scales != nullptr) scale *= a.k_scales[kvh];
  if (a.v_scales != nullptr) v_scale = a.v_scales[kvh];

  // Lane r of the warp holds the block id of row r % 16 of the next kRing - 1 tiles to load, as in
  // paged_decode_mma.cu; HD / 16 lanes copy a row.
  const int tile_row = lane & (kTile - 1);
  auto block_of = [&](int i) -> int {
    const int p = start + (warp + kWarps * i) * kTile + tile_row;
    return i < my_tiles && p < end ? table[p / a.block_size] : 0;
  };
  int next[kRing - 1];
#pragma unroll
  for (int j = 0; j < kRing - 1; ++j) next[j] = block_of(j);
  const bool tile_in_block = a.block_size % kTile == 0;
  auto load_tile = [&](int i, int stage) {
    const int n0 = start + (warp + kWarps * i) * kTile;
    const int blocks = next[0];
#pragma unroll
    for (int j = 0; j + 1 < kRing - 1; ++j) next[j] = next[j + 1];
    next[kRing - 2] = block_of(i + kRing - 1);
    int64_t tile_base = 0;
    if (tile_in_block) {
      const int64_t block = __shfl_sync(kFullMask, blocks, 0);
      tile_base = (block * 2 * a.block_size + n0 % a.block_size) * row_elems + static_cast<int64_t>(kvh) * HD;
    }
    constexpr int kRows = 32 / kChunks;  // rows one instruction covers
    const int sub = lane / kChunks, c = lane % kChunks;
    uint8_t* dk = ring + stage * L::kStageBytes;
    uint8_t* dv = dk + kTile * HD;
#pragma unroll
    for (int j = 0; j < kTile / kRows; ++j) {
      const int r = j * kRows + sub, p = n0 + r;
      int64_t at = tile_base + r * row_elems;
      if (!tile_in_block) {
        const int64_t block = __shfl_sync(kFullMask, blocks, r);
        at = (block * 2 * a.block_size + p % a.block_size) * row_elems + static_cast<int64_t>(kvh) * HD;
      }
      const bool valid = p < end;  // zero codes past `end` (P is 0 there, V must be finite)
      const uint8_t* src = valid ? a.kv_pool_fp8 + at + c * 16 : a.kv_pool_fp8;
      CpAsync16(dk + r * HD + SwizzleK<HD>(r, c) * 16, src, valid);
      CpAsync16(dv + r * HD + SwizzleV<HD>(r, c) * 16, valid ? src + v_shift : src, valid);
    }
  };

  // Group 0: Q (rows past the group zero) and tile 0; groups 1 .. kRing - 2: the next tiles.
  constexpr int kQChunks = HD / 8;  // 16-byte chunks of a bf16 row
  for (int i = tid; i < 16 * kQChunks; i += kThreads) {
    const int r = i / kQChunks, col = (i % kQChunks) * 8;
    const bool valid = r < group;
    CpAsync16(sQ + r * L::kLdQ + col,
              valid ? a.q + seq * a.q_stride + static_cast<int64_t>(h0 + r) * HD + col : a.q, valid);
  }
#pragma unroll
  for (int i = 0; i < kRing - 1; ++i) {
    if (i < my_tiles) load_tile(i, i);
    CpAsyncCommit();
  }
  CpAsyncWait<kRing - 2>();
  __syncthreads();  // every thread's Q copies landed

  // Q's A fragments in f16, k-step kk = 4 h + e holding dims 64 h + 16 t + 4 e + {0..3} of rows
  // g (and g + 8 with kHiRows; rows 8..15 are zero for groups <= 8).
  uint32_t qf[kKSteps][2], qf_hi[kHiRows ? kKSteps : 1][2];
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    const int d0 = (kk / 4) * 64 + 16 * t + 4 * (kk % 4);
    const uint2 lo = *reinterpret_cast<const uint2*>(sQ + g * L::kLdQ + d0);
    qf[kk][0] = Bf16x2ToF16x2(lo.x);
    qf[kk][1] = Bf16x2ToF16x2(lo.y);
    if constexpr (kHiRows) {
      const uint2 hi = *reinterpret_cast<const uint2*>(sQ + (g + 8) * L::kLdQ + d0);
      qf_hi[kk][0] = Bf16x2ToF16x2(hi.x);
      qf_hi[kk][1] = Bf16x2ToF16x2(hi.y);
    }
  }
  auto a_frag = [&](int kk, uint32_t (&af)[4]) {
    af[0] = qf[kk][0];
    af[2] = qf[kk][1];
    af[1] = kHiRows ? qf_hi[kHiRows ? kk : 0][0] : 0u;
    af[3] = kHiRows ? qf_hi[kHiRows ? kk : 0][1] : 0u;
  };

  // O's accumulators: rows g (0, 1) and, with kHiRows, g + 8 (2, 3). For groups <= 8 rows 8..15
  // are not kept (Q's rows there are zero, P's are set to zero): half the registers, and half the
  // softmax.
  constexpr int kAcc = kHiRows ? 4 : 2;
  float o[kDTiles][kAcc];
#pragma unroll
  for (int d = 0; d < kDTiles; ++d) {
#pragma unroll
    for (int c = 0; c < kAcc; ++c) o[d][c] = 0.0f;
  }
  const int col2 = 2 * t;
  const float sl2 = scale * kLog2e;
  // Rows g and g + 8: raw-score max, this lane's part of the exp sums (row g + 8's stay 0 unless
  // kHiRows: FinishMmaCta reads rows below the group only).
  float m0 = -INFINITY, m1 = kHiRows ? -INFINITY : 0.0f;
  float l0 = 0.0f, l1 = 0.0f;

  for (int i = 0; i < my_tiles; ++i) {
    CpAsyncWait<kRing - 2>();  // this lane's copies of tile i landed
    __syncwarp();              // and every lane's; the stage of tile i - 1 is free
    if (i + kRing - 1 < my_tiles) load_tile(i + kRing - 1, (i + kRing - 1) % kRing);
    CpAsyncCommit();
    const uint8_t* sk = ring + (i % kRing) * L::kStageBytes;
    const uint8_t* sv = sk + kTile * HD;
    const int n0 = start + (warp + kWarps * i) * kTile;

    // S = Q K^T: n8 tile j is keys 8 j .. 8 j + 7, column g key 8 j + g.
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int row = 8 * j + g;
#pragma unroll
      for (int h = 0; h < HD / 64; ++h) {
        const uint4 w = *reinterpret_cast<const uint4*>(sk + row * HD + SwizzleK<HD>(row, 4 * h + t) * 16);
        const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          uint32_t b[2], af[4];
          Fp8x4ToF16x4(words[e], b[0], b[1]);
          a_frag(4 * h + e, af);
          MmaF16(s[j], af, b);
        }
      }
    }
    if (n0 + kTile > end) {  // the chunk's last tile: keys past it do not count
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int key = n0 + j * 8 + col2;
        if (key >= end) s[j][0] = s[j][2] = -INFINITY;
        if (key + 1 >= end) s[j][1] = s[j][3] = -INFINITY;
      }
    }
    // Online softmax, as in paged_decode_mma.cu (rows g + 8 only with kHiRows).
    float mx0 = fmaxf(m0, fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1])));
    mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, 2));
    const float alpha0 = Exp2((m0 - mx0) * sl2);
    m0 = mx0;
    const float b0 = mx0 * sl2;
    float alpha1 = 1.0f;
    if constexpr (kHiRows) {
      float mx1 = fmaxf(m1, fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3])));
      mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, 2));
      alpha1 = Exp2((m1 - mx1) * sl2);
      m1 = mx1;
    }
    const float b1 = m1 * sl2;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      s[j][0] = Exp2(s[j][0] * sl2 - b0);
      s[j][1] = Exp2(s[j][1] * sl2 - b0);
      s[j][2] = kHiRows ? Exp2(s[j][2] * sl2 - b1) : 0.0f;
      s[j][3] = kHiRows ? Exp2(s[j][3] * sl2 - b1) : 0.0f;
    }
    l0 = l0 * alpha0 + (s[0][0] + s[0][1]) + (s[1][0] + s[1][1]);
    if constexpr (kHiRows) l1 = l1 * alpha1 + (s[0][2] + s[0][3]) + (s[1][2] + s[1][3]);
    const uint32_t pa[4] = {PackF16x2(s[0][0], s[0][1]), kHiRows ? PackF16x2(s[0][2], s[0][3]) : 0u,
                            PackF16x2(s[1][0], s[1][1]), kHiRows ? PackF16x2(s[1][2], s[1][3]) : 0u};
    // O *= alpha only where a row's max moved (the warp's choice).
    if (__any_sync(kFullMask, alpha0 != 1.0f || alpha1 != 1.0f)) {
#pragma unroll
      for (int d = 0; d < kDTiles; ++d) {
        o[d][0] *= alpha0;
        o[d][1] *= alpha0;
        if constexpr (kHiRows) {
          o[d][kAcc - 2] *= alpha1;
          o[d][kAcc - 1] *= alpha1;
        }
      }
    }

    // O += P V: keys 2t, 2t+1, 2t+8, 2t+9 (P's k columns), bytes [kPart g, kPart (g + 1)) of each.
    RowPart<HD> v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int row = 2 * t + (k & 1) + 8 * (k >> 1);
      v[k] = LoadPart<HD>(sv + row * HD + SwizzleV<HD>(row, (kPart * g) / 16) * 16 + (kPart * g) % 16);
    }
#pragma unroll
    for (int q = 0; q < HD / 32; ++q) {
      // Bytes r of keys (2t, 2t+1) side by side: x01 = dims r = 0, 1; x23 = r = 2, 3; y: keys 2t+8, 2t+9.
      const uint32_t x01 = Prmt2(v[0].w[q], v[1].w[q], 0x5140u), x23 = Prmt2(v[0].w[q], v[1].w[q], 0x7362u);
      const uint32_t y01 = Prmt2(v[2].w[q], v[3].w[q], 0x5140u), y23 = Prmt2(v[2].w[q], v[3].w[q], 0x7362u);
      uint32_t b[4][2];
      Fp8x4ToF16x4(x01, b[0][0], b[1][0]);
      Fp8x4ToF16x4(y01, b[0][1], b[1][1]);
      Fp8x4ToF16x4(x23, b[2][0], b[3][0]);
      Fp8x4ToF16x4(y23, b[2][1], b[3][1]);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        float* acc = o[4 * q + r];
        float d[4] = {acc[0], acc[1], kHiRows ? acc[kAcc - 2] : 0.0f, kHiRows ? acc[kAcc - 1] : 0.0f};
        MmaF16(d, pa, b[r]);
        acc[0] = d[0];
        acc[1] = d[1];
        if constexpr (kHiRows) {
          acc[kAcc - 2] = d[2];
          acc[kAcc - 1] = d[3];
        }
      }
    }
  }
  CpAsyncWait<0>();  // (only empty groups remain)
  __syncwarp();

  // The warp's unnormalized output in its own region, dims un-permuted: column c of n8 tile
  // 4 q + r is dim kPart c + 4 q + r.
  float* so = reinterpret_cast<float*>(ring);  // [16][HD]
#pragma unroll
  for (int j = 0; j < kDTiles; ++j) {
    const int d = kPart * col2 + j;  // (4 q + r = j)
    so[g * HD + d] = o[j][0];
    so[g * HD + d + kPart] = o[j][1];
    if constexpr (kHiRows) {
      so[(g + 8) * HD + d] = o[j][kAcc - 2];
      so[(g + 8) * HD + d + kPart] = o[j][kAcc - 1];
    }
  }
  FinishMmaCta<HD>(a, ws, smem + L::kKV, L::kWarpBytes, s_m, s_l, &s_ticket, seq, split, h0, group, used,
                   scale, v_scale, my_tiles > 0, m0, m1, l0, l1, reinterpret_cast<float*>(smem + L::kKV));
}

template <int HD, int kRing, bool kHiRows>
cudaError_t Launch(const PagedDecodeArgs& a, const Workspace& ws, cudaStream_t stream) {
  constexpr size_t kBytes = Fp8Smem<HD, kRing>::kBytes;
  auto* kernel = &PagedDecodeFp8Kernel<HD, kRing, kHiRows>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kBytes));
  if (err != cudaSuccess) return err;
  TANDEM_LAUNCH(kernel, dim3(ws.splits, a.num_kv_heads, a.num_seqs), kThreads, kBytes, stream, a, ws);
  return cudaGetLastError();
}

template <int HD, int kRing>
cudaError_t LaunchGroup(const PagedDecodeArgs& a, const Workspace& ws, cudaStream_t stream) {
  return a.num_heads / a.num_kv_heads > 8 ? Launch<HD, kRing, true>(a, ws, stream)
                                          : Launch<HD, kRing, false>(a, ws, stream);
}

}  // namespace

cudaError_t LaunchPagedDecodeFp8(const PagedDecodeArgs& a, const Workspace& ws, cudaStream_t stream) {
  switch (a.head_dim * 10 + PagedDecodeFp8Ring()) {
    case 643: return LaunchGroup<64, 3>(a, ws, stream);
    case 644: return LaunchGroup<64, 4>(a, ws, stream);
    case 1283: return LaunchGroup<128, 3>(a, ws, stream);
    case 1284: return LaunchGroup<128, 4>(a, ws, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace decode

int PagedDecodeFp8Ring() {
  static const int ring = [] {
    const char* v = std::getenv("TANDEM_DECODE_FP8_RING");
    return v != nullptr && std::strcmp(v, "3") == 0 ? 3 : 4;
  }();
  return ring;
}

}  // namespace tandem::cuda::detail
