// PagedPrefill (paged_attention.h): flash-attention style causal GQA over the block table.
//
// One block per (64-query tile, query head, sequence), 4 warps; warp w owns query rows
// [16w, 16w + 16) of the tile. For each 64-key tile: S = Q K^T on WMMA bf16 (fp32 accumulate) into
// shared memory, online softmax by the owning warp (2 lanes per row), P (bf16) * V added into the
// output fragments, rescaled through shared memory when a row's max moved.
#include <mma.h>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/paged_attention.h"

namespace tandem::cuda::detail {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kBM = 64;   // query rows per block
constexpr int kBN = 64;   // keys per tile
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;

// Shared-memory layout; leading dimensions padded (bank conflicts) and every region 32-byte
// aligned as WMMA loads and stores require.
template <int HD>
struct Smem {
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
__global__ void __launch_bounds__(kThreads) PagedPrefillKernel(PagedPrefillArgs a) {
  using L = Smem<HD>;
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
  constexpr size_t kBytes = Smem<HD>::kBytes;
  cudaError_t err = cudaFuncSetAttribute(PagedPrefillKernel<HD>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kBytes));
  if (err != cudaSuccess) return err;
  const dim3 grid((a.max_query_len + kBM - 1) / kBM, a.num_heads, a.num_seqs);
  TANDEM_LAUNCH(PagedPrefillKernel<HD>, grid, kThreads, kBytes, stream, a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchPagedPrefill(const PagedPrefillArgs& a, cudaStream_t stream) {
  if (a.num_seqs == 0 || a.max_query_len == 0) return cudaSuccess;
  switch (a.head_dim) {
    case 64: return Launch<64>(a, stream);
    case 128: return Launch<128>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tandem::cuda::detail
