// PagedPrefill (paged_attention.h): flash-attention style causal GQA over the block table.
//
// The default kernel (FlashAttention-2 style, mma.sync): one block of 8 warps per (128-query tile,
// query head, sequence); warp w owns query rows [16w, 16w + 16) of the tile with its Q fragments in
// registers. Keys come in tiles of 64, gathered through the block table with cp.async into a
// three-stage K/V ring in shared memory (tiles t + 1 and t + 2 in flight while t is used; one
// barrier per tile).
// S = Q K^T and O += P V run on mma.sync m16n8k16 bf16 (fp32 accumulate) with ldmatrix
// (.trans for V); the S accumulators are P's A fragments after the online softmax, which stays in
// registers (rows reduced over the 4 lanes of a quad). Only tiles crossing the causal diagonal are
// masked; tiles past the last visible key are never loaded. Query tiles are scheduled heaviest
// (last) first.
//
// PrefillKernel::kMma64: the same with 64-query tiles (4 warps, 2 blocks per SM). kWmma (the
// fallback): the first kernel, WMMA with S, P and the O rescale through shared memory (64-query
// tiles, 4 warps). PrefillKernel::kWgmma (Hopper) lives in paged_prefill_sm90.cu.
#include <mma.h>

#include <cstdlib>
#include <cstring>

#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/mma_utils.cuh"
#include "kernels/cuda/paged_attention.h"

namespace tandem::cuda::detail {
namespace {

namespace wmma = nvcuda::wmma;

// ---- the first kernel (WMMA, S and O through shared memory); kept as a fallback ----
namespace wmma_kernel {
constexpr int kBM = 64;   // query rows per block
constexpr int kBN = 64;   // keys per tile
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;

// Shared-memory layout; leading dimensions padded (bank conflicts) and every region 32-byte
// aligned as WMMA loads and stores require.
template <int HD>
struct WmmaSmem {
  static constexpr int kLdQ = HD + 8;   // bf16: sQ, sK, sV rows
  static constexpr int kLdS = kBN + 4;  // fp32 scores
  static constexpr int kLdP = kBN + 8;  // bf16 probabilities
  static constexpr int kLdO = HD + 4;   // fp32 output staging
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + sizeof(__nv_bfloat16) * kBM * kLdQ;
  static constexpr size_t kV = kK + sizeof(__nv_bfloat16) * kBN * kLdQ;
  static constexpr size_t kS = kV + sizeof(__nv_bfloat16) * kBN * kLdQ;
  static constexpr size_t kP = kS + sizeof(float) * kBM * kLdS;
  static constexpr size_t kO = kP + sizeof(__nv_bfloat16) * kBM * kLdP;
  static constexpr size_t kBytes = kO + sizeof(float) * kBM * kLdO;
  static_assert(kK % 32 == 0 && kV % 32 == 0 && kS % 32 == 0 && kP % 32 == 0 && kO % 32 == 0);
};

template <int HD>
__global__ void __launch_bounds__(kThreads) PagedPrefillWmmaKernel(PagedPrefillArgs a) {
  using L = WmmaSmem<HD>;
  constexpr int kChunks = HD / 8;    // uint4 chunks per row
  constexpr int kDFrags = HD / 16;   // output fragments per warp row block
  TANDEM_DYNAMIC_SHARED(smem);
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem + L::kQ);
  __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem + L::kK);
  __nv_bfloat16* sV = reinterpret_cast<__nv_bfloat16*>(smem + L::kV);
  float* sS = reinterpret_cast<float*>(smem + L::kS);
  __nv_bfloat16* sP = reinterpret_cast<__nv_bfloat16*>(smem + L::kP);
  float* sO = reinterpret_cast<float*>(smem + L::kO);

  const int seq = blockIdx.z;
  const int h = blockIdx.y;
  const int m0 = blockIdx.x * kBM;
  const int q_begin = a.query_start_loc[seq];
  const int n = a.query_start_loc[seq + 1] - q_begin;
  if (m0 >= n) return;
  const int start = a.start_pos[seq];
  const int ctx = start + n;                                 // keys [0, ctx) exist
  const int kv_len = start + min(m0 + kBM, n);               // keys this tile can see
  const int kvh = h / (a.num_heads / a.num_kv_heads);
  const int64_t row_elems = static_cast<int64_t>(a.num_kv_heads) * HD;
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.block_table_stride;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;

  // Q tile -> sQ (rows past the slice are zero).
  for (int c = threadIdx.x; c < kBM * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (m0 + r < n) {
      v = *reinterpret_cast<const uint4*>(a.q + (q_begin + m0 + r) * a.q_stride +
                                          static_cast<int64_t>(h) * HD + col);
    }
    *reinterpret_cast<uint4*>(sQ + r * L::kLdQ + col) = v;
  }
  __syncthreads();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> q_frag[kDFrags];
#pragma unroll
  for (int kk = 0; kk < kDFrags; ++kk) {
    wmma::load_matrix_sync(q_frag[kk], sQ + warp * 16 * L::kLdQ + kk * 16, L::kLdQ);
  }
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> o_frag[kDFrags];
#pragma unroll
  for (int j = 0; j < kDFrags; ++j) wmma::fill_fragment(o_frag[j], 0.0f);

  // Softmax state of row r = 16 * warp + lane / 2, kept by both lanes of the pair.
  const int r_local = lane >> 1;
  const int r = warp * 16 + r_local;
  const int half = lane & 1;
  const int q_limit = min(start + m0 + r, ctx - 1);  // last key position this row may see
  float m_row = -INFINITY;
  float l_row = 0.0f;

  for (int n0 = 0; n0 < kv_len; n0 += kBN) {
    __syncthreads();  // every warp is done with the previous sK/sV
    for (int c = threadIdx.x; c < kBN * kChunks; c += kThreads) {
      const int kr = c / kChunks, col = (c % kChunks) * 8;
      const int p = n0 + kr;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (p < kv_len) {
        const int64_t slot = static_cast<int64_t>(table[p / a.block_size]) * a.block_size +
                             p % a.block_size;
        const int64_t block = slot / a.block_size, offset = slot % a.block_size;
        const __nv_bfloat16* k_src = a.kv_pool + ((block * 2) * a.block_size + offset) * row_elems +
                                     static_cast<int64_t>(kvh) * HD + col;
        kv = *reinterpret_cast<const uint4*>(k_src);
        vv = *reinterpret_cast<const uint4*>(k_src + a.block_size * row_elems);
      }
      *reinterpret_cast<uint4*>(sK + kr * L::kLdQ + col) = kv;
      *reinterpret_cast<uint4*>(sV + kr * L::kLdQ + col) = vv;
    }
    __syncthreads();

    // S[16 rows of this warp, 64 keys] = Q K^T.
#pragma unroll
    for (int j = 0; j < kBN / 16; ++j) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> s_frag;
      wmma::fill_fragment(s_frag, 0.0f);
#pragma unroll
      for (int kk = 0; kk < kDFrags; ++kk) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> k_frag;
        wmma::load_matrix_sync(k_frag, sK + j * 16 * L::kLdQ + kk * 16, L::kLdQ);
        wmma::mma_sync(s_frag, q_frag[kk], k_frag, s_frag);
      }
      wmma::store_matrix_sync(sS + warp * 16 * L::kLdS + j * 16, s_frag, L::kLdS,
                              wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax over this row's half of the tile (32 keys per lane).
    const float* s_row = sS + r * L::kLdS + half * 32;
    __nv_bfloat16* p_row = sP + r * L::kLdP + half * 32;
    float tile_max = -INFINITY;
    float s_val[32];
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      const int p = n0 + half * 32 + c;
      s_val[c] = p <= q_limit ? s_row[c] * a.scale : -INFINITY;
      tile_max = fmaxf(tile_max, s_val[c]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 1));
    const float m_new = fmaxf(m_row, tile_max);  // finite: key 0 is visible to every row
    const float alpha = expf(m_row - m_new);     // 0 on the first tile
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < 32; c += 2) {
      const float p0 = expf(s_val[c] - m_new), p1 = expf(s_val[c + 1] - m_new);
      sum += p0 + p1;
      *reinterpret_cast<__nv_bfloat162*>(p_row + c) = __floats2bfloat162_rn(p0, p1);
    }
    sum += __shfl_xor_sync(kFullMask, sum, 1);
    l_row = l_row * alpha + sum;
    m_row = m_new;

    // Rescale the output rows whose max moved (staged through sO: fragment layouts are opaque).
    if (n0 > 0 && __any_sync(kFullMask, alpha != 1.0f)) {
#pragma unroll
      for (int j = 0; j < kDFrags; ++j) {
        wmma::store_matrix_sync(sO + warp * 16 * L::kLdO + j * 16, o_frag[j], L::kLdO,
                                wmma::mem_row_major);
      }
      __syncwarp();
      float* o_row = sO + r * L::kLdO + half * (HD / 2);
#pragma unroll 8
      for (int c = 0; c < HD / 2; ++c) o_row[c] *= alpha;
      __syncwarp();
#pragma unroll
      for (int j = 0; j < kDFrags; ++j) {
        wmma::load_matrix_sync(o_frag[j], sO + warp * 16 * L::kLdO + j * 16, L::kLdO,
                               wmma::mem_row_major);
      }
    }
    __syncwarp();

    // O += P V.
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> p_frag;
      wmma::load_matrix_sync(p_frag, sP + warp * 16 * L::kLdP + kk * 16, L::kLdP);
#pragma unroll
      for (int j = 0; j < kDFrags; ++j) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> v_frag;
        wmma::load_matrix_sync(v_frag, sV + kk * 16 * L::kLdQ + j * 16, L::kLdQ);
        wmma::mma_sync(o_frag[j], p_frag, v_frag, o_frag[j]);
      }
    }
  }

  // out = O / l for the rows inside the slice.
#pragma unroll
  for (int j = 0; j < kDFrags; ++j) {
    wmma::store_matrix_sync(sO + warp * 16 * L::kLdO + j * 16, o_frag[j], L::kLdO,
                            wmma::mem_row_major);
  }
  __syncwarp();
  if (m0 + r < n) {
    const float inv_l = 1.0f / l_row;
    const float* o_row = sO + r * L::kLdO + half * (HD / 2);
    __nv_bfloat16* dst = a.out + (q_begin + m0 + r) * a.out_stride + static_cast<int64_t>(h) * HD +
                         half * (HD / 2);
#pragma unroll
    for (int c = 0; c < HD / 2; c += 8) {
      float v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = o_row[c + e] * inv_l;
      *reinterpret_cast<uint4*>(dst + c) = FloatToBf16x8(v);
    }
  }
}

template <int HD>
cudaError_t Launch(const PagedPrefillArgs& a, cudaStream_t stream) {
  constexpr size_t kBytes = WmmaSmem<HD>::kBytes;
  cudaError_t err = cudaFuncSetAttribute(PagedPrefillWmmaKernel<HD>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kBytes));
  if (err != cudaSuccess) return err;
  const dim3 grid((a.max_query_len + kBM - 1) / kBM, a.num_heads, a.num_seqs);
  TANDEM_LAUNCH(PagedPrefillWmmaKernel<HD>, grid, kThreads, kBytes, stream, a);
  return cudaGetLastError();
}
}  // namespace wmma_kernel

// ---- the FlashAttention-2 style kernel (mma.sync m16n8k16, softmax in registers) ----
namespace fa2 {
constexpr int kBN = 64;  // keys per tile
constexpr float kLog2e = 1.4426950408889634f;

// Shared memory: Q tile (reused to stage the output) and a ring of kStages K and V tiles: three
// for 128-query tiles (139 KB at head_dim 128, one CTA per SM), two for 64-query tiles (87 KB, two
// CTAs per SM). Rows padded by 16 bytes so that the 8 row addresses of an ldmatrix hit 8
// different 16-byte bank groups.
template <int HD, int kBM>
struct Smem {
  static constexpr int kStages = kBM == 128 ? 3 : 2;
  static constexpr int kLd = HD + 8;  // bf16 elements per row
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + sizeof(__nv_bfloat16) * kBM * kLd;
  static constexpr size_t kV = kK + sizeof(__nv_bfloat16) * kStages * kBN * kLd;
  static constexpr size_t kBytes = kV + sizeof(__nv_bfloat16) * kStages * kBN * kLd;
  static_assert(kK % 16 == 0 && kV % 16 == 0 && (kLd * 2) % 16 == 0);
};

// kBM query rows per block (kBM / 16 warps).
template <int HD, int kBM>
__global__ void __launch_bounds__(2 * kBM, kBM == 128 ? 1 : 2) PagedPrefillKernel(PagedPrefillArgs a) {
  constexpr int kThreads = 2 * kBM;
  using L = Smem<HD, kBM>;
  constexpr int kStages = L::kStages;
  constexpr int kLd = L::kLd;
  constexpr int kChunks = HD / 8;   // 16-byte chunks per row
  constexpr int kKSteps = HD / 16;  // k-steps of Q K^T
  constexpr int kDTiles = HD / 8;   // n8 tiles of O
  constexpr int kNTiles = kBN / 8;  // n8 tiles of S
  TANDEM_DYNAMIC_SHARED(smem);
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem + L::kQ);
  __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem + L::kK);
  __nv_bfloat16* sV = reinterpret_cast<__nv_bfloat16*>(smem + L::kV);

  const int seq = blockIdx.z;
  const int h = blockIdx.x;
  const int m0 = (gridDim.y - 1 - blockIdx.y) * kBM;  // the longest (last) query tiles first
  const int q_begin = a.query_start_loc[seq];
  const int n = a.query_start_loc[seq + 1] - q_begin;
  if (m0 >= n) return;
  const int start = a.start_pos[seq];
  const int ctx = start + n;                    // keys [0, ctx) exist
  const int kv_len = start + min(m0 + kBM, n);  // keys this tile can see
  const int num_tiles = (kv_len + kBN - 1) / kBN;
  const int kvh = h / (a.num_heads / a.num_kv_heads);
  const int64_t row_elems = static_cast<int64_t>(a.num_kv_heads) * HD;
  const int bs = a.block_size;
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.block_table_stride;
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;

  // Keys [n0, n0 + kBN) -> stage (zeros past kv_len: P is 0 there, V must be finite).
  auto load_kv = [&](int n0, int stage) {
    __nv_bfloat16* dk = sK + stage * kBN * kLd;
    __nv_bfloat16* dv = sV + stage * kBN * kLd;
#pragma unroll
    for (int i = 0; i < kBN * kChunks / kThreads; ++i) {
      const int c = tid + i * kThreads;
      const int kr = c / kChunks, col = (c % kChunks) * 8;
      const int p = n0 + kr;
      const bool valid = p < kv_len;
      const __nv_bfloat16* src = a.kv_pool;
      if (valid) {
        // 16-token blocks (the default) by shift and mask: a division per row cost the Hopper
        // kernel a third of its time (dev/kernels/NOTES.md, session 16).
        const int64_t block = table[bs == 16 ? p >> 4 : p / bs];
        const int in_block = bs == 16 ? p & 15 : p % bs;
        src = a.kv_pool + (block * 2 * bs + in_block) * row_elems + static_cast<int64_t>(kvh) * HD + col;
      }
      CpAsync16(dk + kr * kLd + col, src, valid);
      CpAsync16(dv + kr * kLd + col, valid ? src + bs * row_elems : src, valid);
    }
  };
  static_assert(kBN * kChunks % kThreads == 0 && kBM * kChunks % kThreads == 0);

  // Group 0: Q (rows past the slice zero) and key tile 0; group i < kStages - 1: key tile i
  // (empty past the last tile).
#pragma unroll
  for (int i = 0; i < kBM * kChunks / kThreads; ++i) {
    const int c = tid + i * kThreads;
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = m0 + r < n;
    const __nv_bfloat16* src =
        valid ? a.q + (q_begin + m0 + r) * a.q_stride + static_cast<int64_t>(h) * HD + col : a.q;
    CpAsync16(sQ + r * kLd + col, src, valid);
  }
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < num_tiles) load_kv(i * kBN, i);
    CpAsyncCommit();
  }
  CpAsyncWait<kStages - 2>();
  __syncthreads();

  // Q fragments of this warp's 16 rows: matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15).
  uint32_t qf[kKSteps][4];
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    LdMatrixX4(qf[kk], sQ + (warp * 16 + (lane & 15)) * kLd + kk * 16 + (lane >> 4) * 8);
  }

  float o[kDTiles][4];
#pragma unroll
  for (int d = 0; d < kDTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  // This lane's rows: r0 = 16 warp + lane / 4 and r0 + 8. Running max (raw scores) and the lane's
  // partial exp sum (its 2 columns of every n8 tile; the quad is summed at the end).
  const int r0 = warp * 16 + (lane >> 2);
  const int lim0 = min(start + m0 + r0, ctx - 1);  // last key position row r0 may see
  const int lim1 = min(start + m0 + r0 + 8, ctx - 1);
  const int col2 = 2 * (lane & 3);
  const float sl2 = a.scale * kLog2e;
  float m_run0 = -INFINITY, m_run1 = -INFINITY;
  float l_run0 = 0.0f, l_run1 = 0.0f;

  for (int t = 0; t < num_tiles; ++t) {
    const int n0 = t * kBN;
    const int stage = t % kStages;
    CpAsyncWait<kStages - 2>();  // tile t has landed (the next kStages - 2 may be in flight)
    // Every warp sees tile t and is done with tile t - 1, whose stage is refilled with tile
    // t + kStages - 1 (one barrier a tile).
    __syncthreads();
    if (t + kStages - 1 < num_tiles) load_kv((t + kStages - 1) * kBN, (t + kStages - 1) % kStages);
    CpAsyncCommit();
    const __nv_bfloat16* tk = sK + stage * kBN * kLd;
    const __nv_bfloat16* tv = sV + stage * kBN * kLd;

    // S = Q K^T for 16 rows x 64 keys. One ldmatrix x4 gives the B fragments of two n8 key tiles:
    // matrices (keys 0-7 | 8-15) x (dims 0-7 | 8-15).
    float s[kNTiles][4];
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        uint32_t kb[4];
        LdMatrixX4(kb, tk + (np * 16 + (lane >> 4) * 8 + (lane & 7)) * kLd + kk * 16 +
                           ((lane >> 3) & 1) * 8);
        MmaBf16(s[2 * np], qf[kk], kb);
        MmaBf16(s[2 * np + 1], qf[kk], kb + 2);
      }
    }

    // Causal mask on the tiles that cross the diagonal (or the end of the keys).
    if (n0 + kBN - 1 > start + m0) {
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        const int key = n0 + j * 8 + col2;
        if (key > lim0) s[j][0] = -INFINITY;
        if (key + 1 > lim0) s[j][1] = -INFINITY;
        if (key > lim1) s[j][2] = -INFINITY;
        if (key + 1 > lim1) s[j][3] = -INFINITY;
      }
    }

    // Online softmax. Every row sees key 0 (tile 0), so the running max is finite from then on.
    // Row max and sum over two partial values each (shorter dependency chains).
    float a0[2] = {m_run0, -INFINITY}, a1[2] = {m_run1, -INFINITY};
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
      a0[j & 1] = fmaxf(a0[j & 1], fmaxf(s[j][0], s[j][1]));
      a1[j & 1] = fmaxf(a1[j & 1], fmaxf(s[j][2], s[j][3]));
    }
    float mx0 = fmaxf(a0[0], a0[1]), mx1 = fmaxf(a1[0], a1[1]);
    mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, 2));
    const float alpha0 = Exp2((m_run0 - mx0) * sl2);  // 0 on the first tile
    const float alpha1 = Exp2((m_run1 - mx1) * sl2);
    m_run0 = mx0;
    m_run1 = mx1;
    const float base0 = mx0 * sl2, base1 = mx1 * sl2;
    float u0[2] = {0.0f, 0.0f}, u1[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
      s[j][0] = Exp2(s[j][0] * sl2 - base0);
      s[j][1] = Exp2(s[j][1] * sl2 - base0);
      s[j][2] = Exp2(s[j][2] * sl2 - base1);
      s[j][3] = Exp2(s[j][3] * sl2 - base1);
      u0[j & 1] += s[j][0] + s[j][1];
      u1[j & 1] += s[j][2] + s[j][3];
    }
    l_run0 = l_run0 * alpha0 + (u0[0] + u0[1]);
    l_run1 = l_run1 * alpha1 + (u1[0] + u1[1]);
    ScaleAccRows(o, alpha0, alpha1);

    // O += P V: the accumulators of key tiles 2ks and 2ks + 1 are the A fragment of k-step ks.
    // V's B fragments by ldmatrix.trans: matrices (keys 0-7 | 8-15) x (dims 0-7 | 8-15).
#pragma unroll
    for (int ks = 0; ks < kBN / 16; ++ks) {
      const uint32_t pa[4] = {PackBf16x2(s[2 * ks][0], s[2 * ks][1]),
                              PackBf16x2(s[2 * ks][2], s[2 * ks][3]),
                              PackBf16x2(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                              PackBf16x2(s[2 * ks + 1][2], s[2 * ks + 1][3])};
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        uint32_t vb[4];
        LdMatrixX4Trans(vb, tv + (ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * kLd + dp * 16 +
                                (lane >> 4) * 8);
        MmaBf16(o[2 * dp], pa, vb);
        MmaBf16(o[2 * dp + 1], pa, vb + 2);
      }
    }
  }

  // out = O / l: staged as bf16 in this warp's own 16 rows of sQ (no other warp reads them), then
  // written as 16-byte rows.
  l_run0 += __shfl_xor_sync(kFullMask, l_run0, 1);
  l_run0 += __shfl_xor_sync(kFullMask, l_run0, 2);
  l_run1 += __shfl_xor_sync(kFullMask, l_run1, 1);
  l_run1 += __shfl_xor_sync(kFullMask, l_run1, 2);
  const float inv0 = 1.0f / l_run0, inv1 = 1.0f / l_run1;
  __nv_bfloat16* so = sQ + warp * 16 * kLd;
#pragma unroll
  for (int d = 0; d < kDTiles; ++d) {
    *reinterpret_cast<uint32_t*>(so + (lane >> 2) * kLd + d * 8 + col2) =
        PackBf16x2(o[d][0] * inv0, o[d][1] * inv0);
    *reinterpret_cast<uint32_t*>(so + ((lane >> 2) + 8) * kLd + d * 8 + col2) =
        PackBf16x2(o[d][2] * inv1, o[d][3] * inv1);
  }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 16 * kChunks / 32; ++i) {
    const int c = lane + i * 32;
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const int row = m0 + warp * 16 + r;
    if (row < n) {
      *reinterpret_cast<uint4*>(a.out + (q_begin + row) * a.out_stride +
                                static_cast<int64_t>(h) * HD + col) =
          *reinterpret_cast<const uint4*>(so + r * kLd + col);
    }
  }
}

template <int HD, int kBM>
cudaError_t Launch(const PagedPrefillArgs& a, cudaStream_t stream) {
  constexpr size_t kBytes = Smem<HD, kBM>::kBytes;
  cudaError_t err = cudaFuncSetAttribute(&PagedPrefillKernel<HD, kBM>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kBytes));
  if (err != cudaSuccess) return err;
  const dim3 grid(a.num_heads, (a.max_query_len + kBM - 1) / kBM, a.num_seqs);
  auto* kernel = &PagedPrefillKernel<HD, kBM>;
  TANDEM_LAUNCH(kernel, grid, 2 * kBM, kBytes, stream, a);
  return cudaGetLastError();
}
}  // namespace fa2

template <int HD>
size_t SmemBytes(PrefillKernel k) {
  switch (k) {
    case PrefillKernel::kWgmma: return HD == 128 ? PagedPrefillWgmmaSmemBytes() : 0;
    case PrefillKernel::kWmma: return wmma_kernel::WmmaSmem<HD>::kBytes;
    case PrefillKernel::kMma64: return fa2::Smem<HD, 64>::kBytes;
    case PrefillKernel::kMma128: return fa2::Smem<HD, 128>::kBytes;
    default: return 0;
  }
}

size_t SmemBytesHd(PrefillKernel k, int head_dim) {
  return head_dim == 64 ? SmemBytes<64>(k) : head_dim == 128 ? SmemBytes<128>(k) : 0;
}

bool Fits(PrefillKernel k, int head_dim, const DeviceLimits& d) {
  const size_t bytes = SmemBytesHd(k, head_dim);
  return bytes > 0 && bytes <= d.smem_per_block_optin;
}

// The Hopper kernel applies on compute capability 9.0 in a build with sm_90a code, at head_dim
// 128, where its shared memory fits a block.
bool WgmmaApplies(const PagedPrefillArgs& a, const DeviceLimits& d) {
  return PagedPrefillWgmmaBuilt() && d.cc_major == 9 && d.cc_minor == 0 && a.head_dim == 128 &&
         Fits(PrefillKernel::kWgmma, a.head_dim, d);
}

// kAuto: TANDEM_PREFILL_KERNEL if set; else the Hopper kernel where it applies; else, among the
// kernels whose shared memory fits the device's per-block limit, 128-query tiles unless they would
// not make two waves of CTAs (one per SM each), where 64-query tiles (two per SM where they fit
// twice) finish sooner. On GPUs with 99 KiB per block (sm_86, sm_89, sm_120) the 128-query tiles
// (136 KiB at head_dim 128) do not fit and every prefill takes 64-query tiles (85 KiB).
PrefillKernel Choose(const PagedPrefillArgs& a, const DeviceLimits& d) {
  static const PrefillKernel from_env = [] {
    const char* k = std::getenv("TANDEM_PREFILL_KERNEL");
    if (k == nullptr) return PrefillKernel::kAuto;
    if (std::strcmp(k, "wmma") == 0) return PrefillKernel::kWmma;
    if (std::strcmp(k, "mma64") == 0) return PrefillKernel::kMma64;
    if (std::strcmp(k, "mma128") == 0) return PrefillKernel::kMma128;
    if (std::strcmp(k, "wgmma") == 0) return PrefillKernel::kWgmma;
    return PrefillKernel::kAuto;
  }();
  const PrefillKernel asked = a.kernel != PrefillKernel::kAuto ? a.kernel : from_env;
  if (asked == PrefillKernel::kWgmma || asked == PrefillKernel::kAuto) {
    if (WgmmaApplies(a, d)) return PrefillKernel::kWgmma;
  } else {
    return asked;
  }
  const bool fits128 = Fits(PrefillKernel::kMma128, a.head_dim, d);
  const bool fits64 = Fits(PrefillKernel::kMma64, a.head_dim, d);
  if (!fits128 && !fits64) return PrefillKernel::kWmma;
  if (!fits128) return PrefillKernel::kMma64;
  const int64_t ctas128 = int64_t{(a.max_query_len + 127) / 128} * a.num_heads * a.num_seqs;
  return fits64 && ctas128 < 2 * int64_t{d.sm_count} ? PrefillKernel::kMma64
                                                      : PrefillKernel::kMma128;
}

template <int HD>
cudaError_t LaunchHd(const PagedPrefillArgs& a, cudaStream_t stream) {
  switch (Choose(a, CurrentDeviceLimits())) {
    case PrefillKernel::kWgmma: return LaunchPagedPrefillWgmma(a, stream);
    case PrefillKernel::kWmma: return wmma_kernel::Launch<HD>(a, stream);
    case PrefillKernel::kMma64: return fa2::Launch<HD, 64>(a, stream);
    default: return fa2::Launch<HD, 128>(a, stream);
  }
}

}  // namespace

PrefillKernel ChoosePagedPrefillKernel(const PagedPrefillArgs& a, const DeviceLimits& limits) {
  return Choose(a, limits);
}

size_t PagedPrefillSmemBytes(PrefillKernel kernel, int head_dim) {
  return SmemBytesHd(kernel, head_dim);
}

cudaError_t LaunchPagedPrefill(const PagedPrefillArgs& a, cudaStream_t stream) {
  if (a.num_seqs == 0 || a.max_query_len == 0) return cudaSuccess;
  switch (a.head_dim) {
    case 64: return LaunchHd<64>(a, stream);
    case 128: return LaunchHd<128>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tandem::cuda::detail
