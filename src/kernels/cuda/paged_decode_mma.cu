// PagedDecode on the tensor cores (paged_attention.h, DecodeKernel::kMma): the query heads of one
// KV head are the rows of an m16n8k16 tile (group <= 16; rows past the group are zero), so each
// K/V row is read from the pool once for all of them and the dots and the P*V product are mma.sync
// bf16 with fp32 accumulators, as in paged_prefill.cu's FlashAttention-2 kernel.
//
// Grid (num_splits, KV head, sequence), 4 warps per CTA. The CTA's chunk of the context (SplitLayout)
// is cut into 16-key tiles; warp w takes tiles w, w + 4, w + 8, ... and streams them through its own
// ring of kStages shared-memory stages with cp.async (16 bytes a copy), so no barrier is shared
// between warps while the keys stream. Loads (kRowLoads): each cp.async instruction of the warp
// covers whole 128-byte lines (HD / 8 lanes per K or V row, 2 rows at head_dim 128), and the
// block ids of a tile's 16 rows are read one tile ahead (lane r holds row r's, shuffled to the
// lanes that copy it), so no page-table load stands in front of a tile's copies. The first
// version (DecodeKernel::kMmaPairLoads, kept to measure beside it) gave each lane pair one row:
// an instruction touched 16 lines 32 bytes each, after a page-table read of its own. Each warp keeps an online
// softmax (raw-score max, exp sum, fp32 output) for the 16 rows; at the end the CTA merges its four
// warps through shared memory, and the chunk's result is either the output (one chunk) or a split
// result that the last CTA to finish merges (paged_decode_split.cuh), as the SIMT kernel does.
//
// Shared memory at head_dim 128: Q 16 x 136 bf16 (4.25 KiB) + 4 warps x kStages x (K, V) 16 x 136
// bf16 (8.5 KiB a stage): 106.25 KiB at 3 stages (two CTAs per SM on sm_80 / sm_90 / sm_100),
// 72.25 KiB at 2 stages (GPUs with 99 KiB a block: one CTA per SM); rows padded by 16 bytes so
// that the 8 row addresses of an ldmatrix hit different bank groups.
//
// FP8 KV (kFp8, PagedDecodeArgs::kv_pool_fp8; row loads only): a shared-memory layout of its own, a
// warp's region holding 3 stages of codes (K then V, 16 x HD bytes each, unpadded: 4 KiB a stage
// at head_dim 128, half of bf16's) and one 16-bit tile (16 x kLd) that the warp converts the
// landed K into, then V, before the same ldmatrix code reads it: 69.25 KiB a CTA, three CTAs an SM
// (Nsight Compute at batch 256 found the kernel issue-latency-bound with two: 0.38 instructions a
// cycle per scheduler, fixed-latency and MIO dependencies; results/2026-12-04a-*). The tile is f16, not
// bf16: cvt.rn.f16x2.e4m3x2 gives two exact values an instruction on sm_89+ (Fp8x4ToF16x4), where
// the bf16 bit trick took about five integer operations and a multiply per pair and left the
// kernel issue-bound (no faster than over bf16 at half the bytes; results/2026-12-04a-*), so the
// MMAs of this path are f16 (Q converted once, P rounded to f16: finer than bf16 on [0, 1]).
// K's scale multiplies the softmax scale, V's the output.
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/fp8_utils.cuh"
#include "kernels/cuda/paged_decode_mma.cuh"

#include <cstdlib>

namespace tandem::cuda::detail {
namespace decode {
namespace {

constexpr int kTile = 16;  // keys per warp tile (one k-step of P*V)

template <int HD, int kStages>
struct MmaSmem {
  static constexpr int kLd = HD + 8;  // bf16 elements per row
  static constexpr size_t kStageBytes = sizeof(__nv_bfloat16) * 2 * kTile * kLd;  // K then V
  static constexpr size_t kWarpBytes = kStages * kStageBytes;
  static constexpr size_t kQ = 0;
  static constexpr size_t kKV = kQ + sizeof(__nv_bfloat16) * 16 * kLd;
  static constexpr size_t kBytes = kKV + kWarps * kWarpBytes;
  // After the loop a warp's stages hold its 16 x HD fp32 output (the merge), and the whole KV
  // region MergeSplits' 2 * 16 * kPagedDecodeMaxSplits floats.
  static_assert(kWarpBytes >= sizeof(float) * 16 * HD, "warp output");
  static_assert(kWarps * kWarpBytes >= sizeof(float) * 2 * 16 * kPagedDecodeMaxSplits, "merge");
  static_assert(kKV % 16 == 0 && kStageBytes % 16 == 0 && (kLd * 2) % 16 == 0);
  // The cluster merge's split result (ClusterPartBytes) in warp 0's region after its output.
  static constexpr size_t kClusterPart = sizeof(float) * 16 * HD;
  static_assert(kClusterPart + ClusterPartBytes<HD>() <= kWarpBytes, "cluster part");
  // FP8 (a layout of its own): a warp's kRingFp8 stages of codes, then its f16 tile (one 16 x kLd
  // matrix: K, then V). 3 stages: 69.25 KiB a CTA at head_dim 128, so three CTAs (12 warps) an SM
  // where bf16's 106 KiB allow two.
  static constexpr int kRingFp8 = 3;
  static constexpr size_t kStageBytesFp8 = 2 * kTile * HD;
  static constexpr size_t kTileBytesFp8 = sizeof(__nv_bfloat16) * kTile * kLd;
  static constexpr size_t kTileFp8 = kRingFp8 * kStageBytesFp8;  // offset of the f16 tile
  static constexpr size_t kWarpBytesFp8 = kTileFp8 + kTileBytesFp8;
  static constexpr size_t kBytesFp8 = kKV + kWarps * kWarpBytesFp8;
  static_assert(kWarpBytesFp8 >= sizeof(float) * 16 * HD, "warp output");
  static_assert(kWarps * kWarpBytesFp8 >= sizeof(float) * 2 * 16 * kPagedDecodeMaxSplits, "merge");
  static_assert(kStageBytesFp8 % 16 == 0 && kWarpBytesFp8 % 16 == 0, "fp8 stages");
};

template <int HD, int kStages, bool kRowLoads, bool kFp8, bool kCluster = false>
__global__ void __launch_bounds__(kThreads, kFp8 ? 3 : 2) PagedDecodeMmaKernel(PagedDecodeArgs a, Workspace ws) {
  static_assert(!kFp8 || kRowLoads, "FP8 KV has the row loads only");
  static_assert(!kCluster || (kRowLoads && !kFp8), "the cluster merge is the bf16 row-load kernel's");
  // A GEMV launched programmatically after this kernel (LinearArgs::programmatic_launch) may
  // start fetching its weights now; it reads this kernel's output only after its wait.
  TriggerDependents();
  using L = MmaSmem<HD, kStages>;
  // Stages of the warp's cp.async ring: kStages of bf16, L::kRingFp8 of FP8 codes.
  constexpr int kRing = kFp8 ? L::kRingFp8 : kStages;
  constexpr size_t kWarpStride = kFp8 ? L::kWarpBytesFp8 : L::kWarpBytes;  // a warp's region
  constexpr int kLd = L::kLd;
  constexpr int kChunks = HD / 8;   // 16-byte chunks per row
  constexpr int kKSteps = HD / 16;  // k-steps of Q K^T
  constexpr int kDTiles = HD / 8;   // n8 tiles of O
  TANDEM_DYNAMIC_SHARED(smem);
  __shared__ float s_m[kWarps][16], s_l[kWarps][16];
  __shared__ unsigned s_ticket;
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem + L::kQ);

  const int seq = blockIdx.z;
  const int kvh = blockIdx.y;
  const int split = blockIdx.x;
  const int group = a.num_heads / a.num_kv_heads;  // <= 16
  const int h0 = kvh * group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  int start = 0, end = 0, used = 0;
  if (!CtaChunk<HD>(a, ws, seq, split, h0, group, &start, &end, &used)) {
    if constexpr (kCluster) {  // the cluster's barriers count every CTA (FinishMmaCta's two)
      ClusterSync();
      ClusterSync();
    }
    return;
  }
  const int num_tiles = (end - start + kTile - 1) / kTile;
  const int my_tiles = warp < num_tiles ? (num_tiles - warp + kWarps - 1) / kWarps : 0;
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.block_table_stride;
  const int64_t row_elems = static_cast<int64_t>(a.num_kv_heads) * HD;
  const int64_t v_shift = static_cast<int64_t>(a.block_size) * row_elems;
  __nv_bfloat16* sKV = reinterpret_cast<__nv_bfloat16*>(smem + L::kKV + warp * kWarpStride);
  // FP8: the warp's stages of codes and its f16 tile (16-bit elements, as ldmatrix reads them);
  // the scales of this CTA's KV head.
  uint8_t* sKV8 = smem + L::kKV + warp * kWarpStride;
  __nv_bfloat16* sTile = reinterpret_cast<__nv_bfloat16*>(sKV8 + L::kTileFp8);
  float scale = a.scale, v_scale = 1.0f;
  if constexpr (kFp8) {
    if (a.k_scales != nullptr) scale *= a.k_scales[kvh];
    if (a.v_scales != nullptr) v_scale = a.v_scales[kvh];
  }

  // Row loads: lane r of the warp holds the block id of row r % 16 of the next kRing - 1 tiles to
  // load (next[0] the first; the prologue's reads are issued together); the lanes copying a row
  // take it by shuffle.
  const int tile_row = lane & (kTile - 1);
  auto block_of = [&](int i) -> int {
    const int p = start + (warp + kWarps * i) * kTile + tile_row;
    return i < my_tiles && p < end ? table[p / a.block_size] : 0;
  };
  static_assert(kRing >= 2 && kRing <= 5);
  int next[kRing - 1];
#pragma unroll
  for (int j = 0; j < kRing - 1; ++j) next[j] = kRowLoads ? block_of(j) : 0;
  // Tiles start at multiples of 16 keys, so where block_size is a multiple of 16 a tile's rows lie
  // in one block: one block id and one modulo per tile, row r at the tile's base + r rows (the
  // per-row shuffle, 64-bit products and modulo were about a quarter of the kernel's instructions
  // at batch 256: results/2026-12-04a-*).
  const bool tile_in_block = a.block_size % kTile == 0;
  auto load_tile_rows = [&](int i, int stage) {
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
    // Element offset of row r (key p) of the tile in the pool (K; V is v_shift further).
    auto row_offset = [&](int r, int p) -> int64_t {
      if (tile_in_block) return tile_base + r * row_elems;
      const int64_t block = __shfl_sync(kFullMask, blocks, r);
      return (block * 2 * a.block_size + p % a.block_size) * row_elems + static_cast<int64_t>(kvh) * HD;
    };
    if constexpr (kFp8) {  // HD / 16 lanes per row of codes
      constexpr int kChunks8 = HD / 16, kRows8 = 32 / kChunks8;
      const int sub = lane / kChunks8, col = (lane % kChunks8) * 16;
      uint8_t* dk = sKV8 + stage * L::kStageBytesFp8;
      uint8_t* dv = dk + kTile * HD;
#pragma unroll
      for (int j = 0; j < kTile / kRows8; ++j) {
        const int r = j * kRows8 + sub, p = n0 + r;
        const int64_t at = row_offset(r, p);
        const bool valid = p < end;  // zero codes past `end`
        const uint8_t* src = valid ? a.kv_pool_fp8 + at + col : a.kv_pool_fp8;
        CpAsync16(dk + r * HD + col, src, valid);
        CpAsync16(dv + r * HD + col, valid ? src + v_shift : src, valid);
      }
      return;
    }
    constexpr int kRows = 32 / kChunks;  // rows one instruction covers
    const int sub = lane / kChunks, col = (lane % kChunks) * 8;
    __nv_bfloat16* dk = sKV + stage * 2 * kTile * kLd;
    __nv_bfloat16* dv = dk + kTile * kLd;
#pragma unroll
    for (int j = 0; j < kTile / kRows; ++j) {
      const int r = j * kRows + sub, p = n0 + r;
      const int64_t at = row_offset(r, p);
      const bool valid = p < end;  // zeros past `end` (P is 0 there, V must be finite)
      const __nv_bfloat16* src = valid ? a.kv_pool + at + col : a.kv_pool;
      CpAsync16(dk + r * kLd + col, src, valid);
      CpAsync16(dv + r * kLd + col, valid ? src + v_shift : src, valid);
    }
  };

  // Pair loads (the first version): this warp's i-th tile (keys start + (warp + 4 i) * 16 ...) ->
  // stage: lane pair (2k, 2k + 1) copies key k's K and V rows, adjacent 16-byte chunks side by
  // side; zeros past `end`.
  const int kr = lane >> 1, half = lane & 1;
  auto load_tile_pairs = [&](int i, int stage) {
    const int p = start + (warp + kWarps * i) * kTile + kr;
    const bool valid = p < end;
    const __nv_bfloat16* src = a.kv_pool;
    if (valid) {
      const int64_t block = table[p / a.block_size];
      src = a.kv_pool + (block * 2 * a.block_size + p % a.block_size) * row_elems +
            static_cast<int64_t>(kvh) * HD;
    }
    __nv_bfloat16* dk = sKV + stage * 2 * kTile * kLd + kr * kLd;
    __nv_bfloat16* dv = dk + kTile * kLd;
#pragma unroll
    for (int j = 0; j < kChunks / 2; ++j) {
      const int col = (2 * j + half) * 8;
      CpAsync16(dk + col, valid ? src + col : src, valid);
      CpAsync16(dv + col, valid ? src + v_shift + col : src, valid);
    }
  };
  auto load_tile = [&](int i, int stage) {
    if constexpr (kRowLoads) {
      load_tile_rows(i, stage);
    } else {
      load_tile_pairs(i, stage);
    }
  };

  // Group 0: Q (every thread; rows past the group zero) and this warp's tile 0; groups 1 ..
  // kRing - 2: its next tiles (empty past its last).
  for (int c = tid; c < 16 * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = r < group;
    CpAsync16(sQ + r * kLd + col,
              valid ? a.q + seq * a.q_stride + static_cast<int64_t>(h0 + r) * HD + col : a.q, valid);
  }
#pragma unroll
  for (int i = 0; i < kRing - 1; ++i) {
    if (i < my_tiles) load_tile(i, i);
    CpAsyncCommit();
  }
  CpAsyncWait<kRing - 2>();  // Q (and tile 0) of this thread landed
  __syncthreads();             // every thread's Q copies landed

  uint32_t qf[kKSteps][4];
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    LdMatrixX4(qf[kk], sQ + (lane & 15) * kLd + kk * 16 + (lane >> 4) * 8);
    if constexpr (kFp8) {
#pragma unroll
      for (int j = 0; j < 4; ++j) qf[kk][j] = Bf16x2ToF16x2(qf[kk][j]);
    }
  }
  // The MMA and P's packing of this path's 16-bit type (FP8 KV: f16).
  auto mma = [](float d[4], const uint32_t a[4], const uint32_t b[2]) {
    if constexpr (kFp8) {
      MmaF16(d, a, b);
    } else {
      MmaBf16(d, a, b);
    }
  };
  auto pack = [](float lo, float hi) { return kFp8 ? PackF16x2(lo, hi) : PackBf16x2(lo, hi); };
  float o[kDTiles][4];
#pragma unroll
  for (int d = 0; d < kDTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  const int col2 = 2 * (lane & 3);
  const float sl2 = scale * kLog2e;
  float m0 = -INFINITY, m1 = -INFINITY;  // rows lane / 4 and lane / 4 + 8: raw-score max
  float l0 = 0.0f, l1 = 0.0f;            // this lane's part of the exp sums

  for (int i = 0; i < my_tiles; ++i) {
    CpAsyncWait<kRing - 2>();  // this lane's copies of tile i landed
    __syncwarp();              // and every lane's; the stage of tile i - 1 is free
    if (i + kRing - 1 < my_tiles) load_tile(i + kRing - 1, (i + kRing - 1) % kRing);
    CpAsyncCommit();
    const __nv_bfloat16* tk = sKV + (i % kStages) * 2 * kTile * kLd;
    const __nv_bfloat16* tv = tk + kTile * kLd;
    // FP8: the 16 x HD codes of K (v = 0) or V (v = 1) of stage i % kRing -> the warp's f16 tile
    // (its earlier readers are past a __syncwarp); 16-byte chunk c is row c / (HD / 16).
    auto convert = [&](int v) {
      constexpr int kChunks8 = HD / 16;
      const uint8_t* src = sKV8 + (i % kRing) * L::kStageBytesFp8 + v * kTile * HD;
#pragma unroll
      for (int c = lane; c < kTile * kChunks8; c += 32) {
        const int row = c / kChunks8, col = (c % kChunks8) * 16;
        const uint4 codes = *reinterpret_cast<const uint4*>(src + row * HD + col);
        uint32_t w[8];
        Fp8x4ToF16x4(codes.x, w[0], w[1]);
        Fp8x4ToF16x4(codes.y, w[2], w[3]);
        Fp8x4ToF16x4(codes.z, w[4], w[5]);
        Fp8x4ToF16x4(codes.w, w[6], w[7]);
        uint4* dst = reinterpret_cast<uint4*>(sTile + row * kLd + col);
        dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
        dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
      }
      __syncwarp();
    };
    if constexpr (kFp8) {
      convert(0);
      tk = tv = sTile;
    }
    const int n0 = start + (warp + kWarps * i) * kTile;

    // S = Q K^T, 16 rows x 16 keys: one ldmatrix x4 a k-step gives both n8 key tiles' B
    // fragments (matrices (keys 0-7 | 8-15) x (dims 0-7 | 8-15)).
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      uint32_t kb[4];
      LdMatrixX4(kb, tk + ((lane >> 4) * 8 + (lane & 7)) * kLd + kk * 16 + ((lane >> 3) & 1) * 8);
      mma(s[0], qf[kk], kb);
      mma(s[1], qf[kk], kb + 2);
    }
    if (n0 + kTile > end) {  // the chunk's last tile: keys past it do not count
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int key = n0 + j * 8 + col2;
        if (key >= end) s[j][0] = s[j][2] = -INFINITY;
        if (key + 1 >= end) s[j][1] = s[j][3] = -INFINITY;
      }
    }
    // Online softmax (every tile has a valid key 0, so the max is finite from the first tile).
    float mx0 = fmaxf(m0, fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1])));
    float mx1 = fmaxf(m1, fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3])));
    mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, 2));
    const float alpha0 = Exp2((m0 - mx0) * sl2), alpha1 = Exp2((m1 - mx1) * sl2);
    m0 = mx0;
    m1 = mx1;
    const float b0 = mx0 * sl2, b1 = mx1 * sl2;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      s[j][0] = Exp2(s[j][0] * sl2 - b0);
      s[j][1] = Exp2(s[j][1] * sl2 - b0);
      s[j][2] = Exp2(s[j][2] * sl2 - b1);
      s[j][3] = Exp2(s[j][3] * sl2 - b1);
    }
    l0 = l0 * alpha0 + (s[0][0] + s[0][1]) + (s[1][0] + s[1][1]);
    l1 = l1 * alpha1 + (s[0][2] + s[0][3]) + (s[1][2] + s[1][3]);
    if constexpr (kFp8) {
      __syncwarp();  // every lane's K fragments are read: V may take the tile
      convert(1);
    }
    // O = O alpha + P V: the two S accumulators are P's A fragment; V's B fragments by
    // ldmatrix.trans (matrices (keys 0-7 | 8-15) x (dims 0-7 | 8-15)).
    const uint32_t pa[4] = {pack(s[0][0], s[0][1]), pack(s[0][2], s[0][3]), pack(s[1][0], s[1][1]),
                            pack(s[1][2], s[1][3])};
    // O *= alpha only where a row's max moved (alpha is exactly 1 elsewhere: ex2 of 0), the
    // warp's choice: after the first tiles of a context the maxima seldom move.
    if (__any_sync(kFullMask, alpha0 != 1.0f || alpha1 != 1.0f)) ScaleAccRows(o, alpha0, alpha1);
#pragma unroll
    for (int dp = 0; dp < kDTiles / 2; ++dp) {
      uint32_t vb[4];
      LdMatrixX4Trans(vb, tv + (((lane >> 3) & 1) * 8 + (lane & 7)) * kLd + dp * 16 + (lane >> 4) * 8);
      mma(o[2 * dp], pa, vb);
      mma(o[2 * dp + 1], pa, vb + 2);
    }
  }
  CpAsyncWait<0>();  // (only empty groups remain)
  __syncwarp();

  // The warp's unnormalized output in its own stages, then the CTA's end.
  float* so = reinterpret_cast<float*>(sKV);  // [16][HD]
  const int r = lane >> 2;
#pragma unroll
  for (int d = 0; d < kDTiles; ++d) {
    so[r * HD + d * 8 + col2] = o[d][0];
    so[r * HD + d * 8 + col2 + 1] = o[d][1];
    so[(r + 8) * HD + d * 8 + col2] = o[d][2];
    so[(r + 8) * HD + d * 8 + col2 + 1] = o[d][3];
  }
  FinishMmaCta<HD>(a, ws, smem + L::kKV, kWarpStride, s_m, s_l, &s_ticket, seq, split, h0, group, used,
                   scale, v_scale, my_tiles > 0, m0, m1, l0, l1, reinterpret_cast<float*>(smem + L::kKV),
                   kCluster ? reinterpret_cast<float*>(smem + L::kKV + L::kClusterPart) : nullptr);
}

template <int HD, int kStages, bool kRowLoads, bool kFp8 = false>
cudaError_t LaunchMmaLoads(const PagedDecodeArgs& a, const Workspace& ws, cudaStream_t stream) {
  constexpr size_t kBytes = kFp8 ? MmaSmem<HD, kStages>::kBytesFp8 : MmaSmem<HD, kStages>::kBytes;
  auto* kernel = &PagedDecodeMmaKernel<HD, kStages, kRowLoads, kFp8>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kBytes));
  if (err != cudaSuccess) return err;
  TANDEM_LAUNCH(kernel, dim3(ws.splits, a.num_kv_heads, a.num_seqs), kThreads, kBytes, stream, a, ws);
  return cudaGetLastError();
}

template <int HD, int kStages>
cudaError_t LaunchMma(const PagedDecodeArgs& a, const Workspace& ws, cudaStream_t stream) {
  if (a.kv_pool_fp8 != nullptr) {
    return a.kernel == DecodeKernel::kMmaFp8Tile ? LaunchMmaLoads<HD, kStages, true, true>(a, ws, stream)
                                                 : LaunchPagedDecodeFp8(a, ws, stream);
  }
  return a.kernel == DecodeKernel::kMmaPairLoads ? LaunchMmaLoads<HD, kStages, false>(a, ws, stream)
                                                 : LaunchMmaLoads<HD, kStages, true>(a, ws, stream);
}

#if !defined(TANDEM_CUDA_EMU)
// The cluster launch: grid (splits, KV heads, sequences), clusters of (splits, 1, 1).
template <int HD, int kStages>
cudaLaunchConfig_t ClusterConfig(int splits, int kv_heads, int seqs, cudaStream_t stream,
                                 cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(splits, kv_heads, seqs);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = MmaSmem<HD, kStages>::kBytes;
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = splits;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

template <int HD, int kStages>
cudaError_t PrepareClusterKernel() {
  auto* kernel = &PagedDecodeMmaKernel<HD, kStages, true, false, true>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(MmaSmem<HD, kStages>::kBytes));
  if (err != cudaSuccess) return err;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
}

template <int HD, int kStages>
cudaError_t LaunchCluster(const PagedDecodeArgs& a, const Workspace& ws, cudaStream_t stream) {
  static const cudaError_t prepared = PrepareClusterKernel<HD, kStages>();
  if (prepared != cudaSuccess) return prepared;
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = ClusterConfig<HD, kStages>(ws.splits, a.num_kv_heads, a.num_seqs, stream, attr);
  return cudaLaunchKernelEx(&cfg, &PagedDecodeMmaKernel<HD, kStages, true, false, true>, a, ws);
}

// Clusters of `size` that the device runs at once (0 where none fits or the query fails).
template <int HD, int kStages>
int ActiveClusters(int size) {
  if (PrepareClusterKernel<HD, kStages>() != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = ClusterConfig<HD, kStages>(size, 64, 1, nullptr, attr);
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, &PagedDecodeMmaKernel<HD, kStages, true, false, true>, &cfg) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

// TANDEM_DECODE_CLUSTER: 0, 8 or 16 (the cap), -1 unset (off).
int EnvClusterCap() {
  static const int cap = [] {
    const char* v = std::getenv("TANDEM_DECODE_CLUSTER");
    if (v == nullptr || *v == '\0') return -1;
    const int n = std::atoi(v);
    return n >= 16 ? 16 : n >= 8 ? 8 : 0;
  }();
  return cap;
}

template <int HD, int kStages>
int ClusterMax() {
  static const int max = [] {
    int dev = 0, major = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    // Off unless asked for: not yet run on a GPU (see PagedDecodeClusterSplitsMax).
    const int cap = EnvClusterCap();
    if (major < 9 || cap <= 0) return 0;
    // Two CTAs an SM (PagedDecodeMmaCtasPerSm at 3 stages): clusters of 16 where they fill at least
    // half of the slots, else 8 where any run.
    const int slots = 2 * sms;
    if (cap != 8 && 16 * ActiveClusters<HD, kStages>(16) >= slots / 2) return 16;
    return ActiveClusters<HD, kStages>(8) > 0 ? 8 : 0;
  }();
  return max;
}
#endif

}  // namespace

int MmaClusterSplitsMax(int head_dim, int stages) {
#if defined(TANDEM_CUDA_EMU)
  (void)head_dim;
  (void)stages;
  return 0;
#else
  switch (head_dim * 10 + stages) {
    case 643: return ClusterMax<64, 3>();
    case 642: return ClusterMax<64, 2>();
    case 1283: return ClusterMax<128, 3>();
    case 1282: return ClusterMax<128, 2>();
    default: return 0;
  }
#endif
}

cudaError_t LaunchPagedDecodeMmaCluster(const PagedDecodeArgs& a, const Workspace& ws, int stages,
                                        cudaStream_t stream) {
#if defined(TANDEM_CUDA_EMU)
  (void)a;
  (void)ws;
  (void)stages;
  (void)stream;
  return cudaErrorInvalidValue;
#else
  if (ws.splits < 2 || ws.splits > kPagedDecodeMaxClusterSplits) return cudaErrorInvalidValue;
  switch (a.head_dim * 10 + stages) {
    case 643: return LaunchCluster<64, 3>(a, ws, stream);
    case 642: return LaunchCluster<64, 2>(a, ws, stream);
    case 1283: return LaunchCluster<128, 3>(a, ws, stream);
    case 1282: return LaunchCluster<128, 2>(a, ws, stream);
    default: return cudaErrorInvalidValue;
  }
#endif
}

size_t MmaSmemBytes(int head_dim, int stages) {
  if (head_dim == 64) return stages == 3 ? MmaSmem<64, 3>::kBytes : MmaSmem<64, 2>::kBytes;
  if (head_dim == 128) return stages == 3 ? MmaSmem<128, 3>::kBytes : MmaSmem<128, 2>::kBytes;
  return 0;
}

cudaError_t LaunchPagedDecodeMma(const PagedDecodeArgs& a, const Workspace& ws, int stages,
                                 cudaStream_t stream) {
  switch (a.head_dim * 10 + stages) {
    case 643: return LaunchMma<64, 3>(a, ws, stream);
    case 642: return LaunchMma<64, 2>(a, ws, stream);
    case 1283: return LaunchMma<128, 3>(a, ws, stream);
    case 1282: return LaunchMma<128, 2>(a, ws, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace decode
}  // namespace tandem::cuda::detail
