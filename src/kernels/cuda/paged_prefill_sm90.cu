// PagedPrefill on Hopper (sm_90a), FlashAttention-3 style (PrefillKernel::kWgmma): warpgroup
// tensor-core instructions (wgmma.mma_async) reading Q, K and V from 128-byte-swizzled shared
// memory, with the P V product of one key tile running while the softmax of the next one is
// computed.
//
// One CTA of two warpgroups (256 threads) per (128-query tile, query head, sequence); warpgroup w
// owns query rows [64w, 64w + 64) of the tile. head_dim 128 only (Qwen3, Llama 3). Keys in tiles of
// 128, gathered through the block table with cp.async (16 bytes a thread, zero-filled past the
// visible keys) into a ring of three K/V stages; Q stays in shared memory for the whole key loop.
// Per key tile t (intra-warpgroup pipelining, FlashAttention-3 section 3.2):
//   issue S(t+1) = Q K(t+1)^T   (m64n128k16, A and B from shared memory, fp32 in registers)
//   issue O += P(t) V(t)        (A = P(t), bf16 in registers; V MN-major from shared memory)
//   wait for S(t+1); mask and online softmax of tile t+1 (exp2, scale folded in) while P V runs
//   wait for P V; rescale O by the new running max, round P(t+1) to bf16.
// The stage of tile t+2 is refilled once every thread has passed tile t+1's barrier, by when both
// warpgroups are done with tile t-1 (three stages: t-1's refill, t in P V, t+1 in S).
// Causal: tiles past the last key the CTA may see are never loaded; only tiles crossing the
// diagonal (or the end of the keys) are masked, per warp. Query tiles are scheduled heaviest first.
// Shared memory: Q 32 KiB + 3 x (K 32 KiB + V 32 KiB) + 1 KiB of alignment = 225 KiB, 1 CTA per SM.
// Instruction count matters as much as the GEMMs (dev/kernels/NOTES.md, session 16): with 16-token
// blocks a tile's eight block ids are read by eight lanes and shuffled (no division per row); the
// wgmma descriptors are three precomputed bases plus constants; the row max and sum reduce over
// four partial values (shorter dependency chains); a warp whose rows kept their max skips the O
// rescale.
// Numerics as the mma.sync kernel (paged_prefill.cu): fp32 scores and softmax, P rounded to bf16.
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/mma_utils.cuh"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/wgmma_utils.cuh"

namespace tandem::cuda::detail {
namespace {
namespace fa3 {

constexpr int kHD = 128;  // head_dim
constexpr int kBM = 128;  // query rows per CTA (2 warpgroups x 64)
constexpr int kBN = 128;  // keys per tile
constexpr int kStages = 3;
constexpr int kThreads = 256;
constexpr uint32_t kTileBytes = kBN * kHD * 2;  // one K or V tile: [2 halves][128 rows][128 B]
constexpr uint32_t kQBytes = kBM * kHD * 2;     // [2 halves][128 rows][128 B]
constexpr size_t kSmemBytes = kQBytes + 2 * kStages * kTileBytes + 1024;  // + 1024-B alignment
#if defined(TANDEM_WGMMA)
constexpr float kLog2e = 1.4426950408889634f;
#endif

__global__ void __launch_bounds__(kThreads, 1) PagedPrefillWgmmaKernel(PagedPrefillArgs a) {
#if defined(TANDEM_WGMMA)
  TANDEM_DYNAMIC_SHARED(smem_raw);
  // The swizzle atoms need 1024-byte alignment.
  unsigned char* smem = smem_raw + ((1024u - (SmemAddr(smem_raw) & 1023u)) & 1023u);
  const uint32_t s_q = SmemAddr(smem);
  const uint32_t s_k = s_q + kQBytes;               // stage s: s_k + s * kTileBytes
  const uint32_t s_v = s_k + kStages * kTileBytes;  // stage s: s_v + s * kTileBytes

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
  const int64_t row_elems = static_cast<int64_t>(a.num_kv_heads) * kHD;
  const int bs = a.block_size;
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.block_table_stride;
  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  const int warp = (tid >> 5) & 3;  // within the warpgroup
  const int lane = tid & 31;

  // Copies: thread tid moves 16-byte chunk (tid & 15) of rows (tid >> 4) + 16 i, i < 8.
  const int ld_chunk = tid & 15;
  const int ld_row = tid >> 4;
  const __nv_bfloat16* kv_chunk = a.kv_pool + static_cast<int64_t>(kvh) * kHD + ld_chunk * 8;
  auto load_kv = [&](int n0, int stage) {
    unsigned char* dk = smem + kQBytes + stage * kTileBytes;
    unsigned char* dv = dk + kStages * kTileBytes;
    if (bs == 16) {
      // Row ld_row + 16 i of the tile is row ld_row of block n0 / 16 + i; lane i < 8 of each warp
      // reads that block id, every lane takes it by shuffle.
      const __nv_bfloat16* base = kv_chunk + ld_row * row_elems;
      const int block_elems = static_cast<int>(32 * row_elems);
      const int ln = tid & 31;
      const int mine = ln < kBN / 16 && n0 + 16 * ln < kv_len ? table[(n0 >> 4) + ln] : 0;
#pragma unroll
      for (int i = 0; i < kBN / 16; ++i) {
        const int r = ld_row + 16 * i;
        const bool valid = n0 + r < kv_len;
        const int block = __shfl_sync(kFullMask, mine, i);
        const __nv_bfloat16* src =
            valid ? base + static_cast<int64_t>(block) * block_elems : a.kv_pool;
        const uint32_t off = SwizzledOffset(r, ld_chunk, kBN);
        CpAsync16(dk + off, src, valid);
        CpAsync16(dv + off, valid ? src + 16 * row_elems : src, valid);
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < kBN / 16; ++i) {
      const int r = ld_row + 16 * i;
      const int p = n0 + r;
      const bool valid = p < kv_len;
      const __nv_bfloat16* src = a.kv_pool;
      if (valid) {
        const int64_t block = table[p / bs];
        src = a.kv_pool + (block * 2 * bs + p % bs) * row_elems + static_cast<int64_t>(kvh) * kHD +
              ld_chunk * 8;
      }
      const uint32_t off = SwizzledOffset(r, ld_chunk, kBN);
      CpAsync16(dk + off, src, valid);
      CpAsync16(dv + off, valid ? src + bs * row_elems : src, valid);
    }
  };

  // Group 0: Q (rows past the slice zero) and key tile 0; group 1: key tile 1 (maybe empty).
#pragma unroll
  for (int i = 0; i < kBM / 16; ++i) {
    const int r = ld_row + 16 * i;
    const bool valid = m0 + r < n;
    const __nv_bfloat16* src =
        valid ? a.q + (q_begin + m0 + r) * a.q_stride + static_cast<int64_t>(h) * kHD + ld_chunk * 8
              : a.q;
    CpAsync16(smem + SwizzledOffset(r, ld_chunk, kBM), src, valid);
  }
  load_kv(0, 0);
  CpAsyncCommit();
  if (num_tiles > 1) load_kv(kBN, 1);
  CpAsyncCommit();
  CpAsyncWait<1>();
  FenceProxyAsync();
  __syncthreads();

  // Descriptors. A: this warpgroup's 64 rows of Q; k-step kk (16 dims) lies in half kk / 4, 32
  // bytes per step into the row. B of S: the stage's K, likewise. B of P V: the stage's V,
  // MN-major, k-step ks = keys 16 ks .. 16 ks + 15 (two 8-row atoms, 2048 bytes).
  const uint32_t q_wg = s_q + wg * 64 * 128;
  // Base descriptors; a k-step or stage adds its byte offset / 16 to the start-address field (the
  // largest address, 225 KiB / 16, stays inside its 14 bits: no carry).
  const uint64_t desc_q = WgmmaDesc(q_wg, 16, 1024);
  const uint64_t desc_k = WgmmaDesc(s_k, 16, 1024);
  const uint64_t desc_v = WgmmaDesc(s_v, kBN * 128, 1024);
  auto issue_s = [&](float(&s)[16][4], int stage) {
#pragma unroll
    for (int kk = 0; kk < kHD / 16; ++kk) {
      const uint32_t off = (kk & 3) * 32;
      WgmmaM64N128K16SS(s, desc_q + (((kk >> 2) * (kBM * 128) + off) >> 4),
                        desc_k + ((stage * kTileBytes + (kk >> 2) * (kBN * 128) + off) >> 4),
                        kk > 0);
    }
  };

  // This lane's rows (query index in the slice): row0 and row0 + 8.
  const int row0 = m0 + wg * 64 + warp * 16 + (lane >> 2);
  const int lim0 = min(start + row0, ctx - 1);  // last key position row0 may see
  const int lim1 = min(start + row0 + 8, ctx - 1);
  const int warp_first = start + m0 + wg * 64 + warp * 16;  // the warp's first row's position
  const int col2 = 2 * (lane & 3);
  const float sl2 = a.scale * kLog2e;
  float m_run0 = -INFINITY, m_run1 = -INFINITY;
  float l_run0 = 0.0f, l_run1 = 0.0f;

  // Mask and online softmax of S (keys n0 .. n0 + 127) in place: s becomes exp2 of the scaled
  // scores minus the new running max; alpha = exp2(old max - new max) (0 on the first tile).
  auto softmax = [&](float(&s)[16][4], int n0, float& alpha0, float& alpha1) {
    if (n0 + kBN - 1 > warp_first) {
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int key = n0 + j * 8 + col2;
        if (key > lim0) s[j][0] = -INFINITY;
        if (key + 1 > lim0) s[j][1] = -INFINITY;
        if (key > lim1) s[j][2] = -INFINITY;
        if (key + 1 > lim1) s[j][3] = -INFINITY;
      }
    }
    float mx0 = m_run0, mx1 = m_run1;
    float a0[4] = {m_run0, -INFINITY, -INFINITY, -INFINITY};
    float a1[4] = {m_run1, -INFINITY, -INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      a0[j & 3] = fmaxf(a0[j & 3], fmaxf(s[j][0], s[j][1]));
      a1[j & 3] = fmaxf(a1[j & 3], fmaxf(s[j][2], s[j][3]));
    }
    mx0 = fmaxf(fmaxf(a0[0], a0[1]), fmaxf(a0[2], a0[3]));
    mx1 = fmaxf(fmaxf(a1[0], a1[1]), fmaxf(a1[2], a1[3]));
    mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, 2));
    alpha0 = Exp2((m_run0 - mx0) * sl2);
    alpha1 = Exp2((m_run1 - mx1) * sl2);
    m_run0 = mx0;
    m_run1 = mx1;
    const float base0 = mx0 * sl2, base1 = mx1 * sl2;
    float u0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, u1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      s[j][0] = Exp2(s[j][0] * sl2 - base0);
      s[j][1] = Exp2(s[j][1] * sl2 - base0);
      s[j][2] = Exp2(s[j][2] * sl2 - base1);
      s[j][3] = Exp2(s[j][3] * sl2 - base1);
      u0[j & 3] += s[j][0] + s[j][1];
      u1[j & 3] += s[j][2] + s[j][3];
    }
    l_run0 = l_run0 * alpha0 + ((u0[0] + u0[1]) + (u0[2] + u0[3]));
    l_run1 = l_run1 * alpha1 + ((u1[0] + u1[1]) + (u1[2] + u1[3]));
  };
  // P's A fragments: k-step ks = the accumulators of n8 tiles 2 ks and 2 ks + 1.
  auto pack_p = [&](const float(&s)[16][4], uint32_t(&p)[8][4]) {
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
      p[ks][0] = PackBf16x2(s[2 * ks][0], s[2 * ks][1]);
      p[ks][1] = PackBf16x2(s[2 * ks][2], s[2 * ks][3]);
      p[ks][2] = PackBf16x2(s[2 * ks + 1][0], s[2 * ks + 1][1]);
      p[ks][3] = PackBf16x2(s[2 * ks + 1][2], s[2 * ks + 1][3]);
    }
  };

  float s[16][4];
  float o[16][4];
  uint32_t p[8][4];
#pragma unroll
  for (int j = 0; j < 16; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = o[j][e] = 0.0f;
  }

  // S(0) and its softmax (O is still zero: nothing to rescale).
  WgmmaFence();
  issue_s(s, 0);
  WgmmaCommit();
  WgmmaWait<0>();
  FenceRegs(s);
  {
    float alpha0, alpha1;
    softmax(s, 0, alpha0, alpha1);
  }
  pack_p(s, p);

  // P(t) V(t) from stage t % kStages with A = P's registers.
  auto issue_pv = [&](int stage) {
#pragma unroll
    for (int ks = 0; ks < kBN / 16; ++ks) {
      WgmmaM64N128K16RSTransB(o, p[ks], desc_v + ((stage * kTileBytes + ks * 2048) >> 4));
    }
  };

  // Every tile but the last: S(t + 1) and P(t) V(t) in flight together (no branch between a
  // wgmma.fence and the waits, so that ptxas need not serialize the wgmmas).
  for (int t = 0; t + 1 < num_tiles; ++t) {
    CpAsyncWait<0>();  // this thread's part of tile t + 1 has landed
    FenceProxyAsync();
    __syncthreads();  // everyone's part; both warpgroups are done with tile t - 1
    WgmmaFence();     // O, P and S were last written by ordinary instructions
    issue_s(s, (t + 1) % kStages);
    WgmmaCommit();
    issue_pv(t % kStages);
    WgmmaCommit();
    // Tile t + 2's copies (into the stage tile t - 1 left) now, their latency under the GEMMs.
    if (t + 2 < num_tiles) load_kv((t + 2) * kBN, (t + 2) % kStages);
    CpAsyncCommit();
    WgmmaWait<1>();  // S(t + 1) is done; P(t) V(t) may still run
    FenceRegs(s);
    float alpha0, alpha1;
    softmax(s, (t + 1) * kBN, alpha0, alpha1);
    WgmmaWait<0>();
    FenceRegs(o);
    FenceRegs(p);
    // A warp whose rows all kept their max (alpha 1: later tiles, mostly) leaves O as it is.
    if (__any_sync(kFullMask, alpha0 != 1.0f || alpha1 != 1.0f)) ScaleAccRows(o, alpha0, alpha1);
    pack_p(s, p);
  }
  WgmmaFence();
  issue_pv((num_tiles - 1) % kStages);
  WgmmaCommit();
  WgmmaWait<0>();
  FenceRegs(o);
  FenceRegs(p);

  // out = O / l, staged as bf16 in this warpgroup's own rows of the Q region (its last S has
  // completed; no other warpgroup reads them), then written as 16-byte rows.
  l_run0 += __shfl_xor_sync(kFullMask, l_run0, 1);
  l_run0 += __shfl_xor_sync(kFullMask, l_run0, 2);
  l_run1 += __shfl_xor_sync(kFullMask, l_run1, 1);
  l_run1 += __shfl_xor_sync(kFullMask, l_run1, 2);
  const float inv0 = 1.0f / l_run0, inv1 = 1.0f / l_run1;
  const int rl = wg * 64 + warp * 16 + (lane >> 2);  // row within the CTA tile
#pragma unroll
  for (int d = 0; d < 16; ++d) {
    *reinterpret_cast<uint32_t*>(smem + SwizzledOffset(rl, d, kBM) + col2 * 2) =
        PackBf16x2(o[d][0] * inv0, o[d][1] * inv0);
    *reinterpret_cast<uint32_t*>(smem + SwizzledOffset(rl + 8, d, kBM) + col2 * 2) =
        PackBf16x2(o[d][2] * inv1, o[d][3] * inv1);
  }
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");  // this warpgroup's 128 threads
  const int wtid = tid & 127;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = wg * 64 + (wtid >> 4) + 8 * i;
    const int c = wtid & 15;
    const int row = m0 + r;
    if (row < n) {
      *reinterpret_cast<uint4*>(a.out + (q_begin + row) * a.out_stride +
                                static_cast<int64_t>(h) * kHD + c * 8) =
          *reinterpret_cast<const uint4*>(smem + SwizzledOffset(r, c, kBM));
    }
  }
#endif  // TANDEM_WGMMA
}

}  // namespace fa3
}  // namespace

bool PagedPrefillWgmmaBuilt() {
#if defined(TANDEM_CUDA_SM90A)
  return true;
#else
  return false;
#endif
}

size_t PagedPrefillWgmmaSmemBytes() {
  return fa3::kSmemBytes;
}

cudaError_t LaunchPagedPrefillWgmma(const PagedPrefillArgs& a, cudaStream_t stream) {
  if (a.head_dim != fa3::kHD || !PagedPrefillWgmmaBuilt()) return cudaErrorInvalidValue;
  auto* kernel = &fa3::PagedPrefillWgmmaKernel;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(fa3::kSmemBytes));
  if (err != cudaSuccess) return err;
  const dim3 grid(a.num_heads, (a.max_query_len + fa3::kBM - 1) / fa3::kBM, a.num_seqs);
  TANDEM_LAUNCH(kernel, grid, fa3::kThreads, fa3::kSmemBytes, stream, a);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::detail
