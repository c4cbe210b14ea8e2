// PagedDecode (paged_attention.h): one query per sequence, split over partitions of the context.
//
// Main kernel: one block (4 warps) per (partition, KV head x query-head chunk, sequence) serves up
// to kMaxGroup query heads that share the KV head, so K and V are read once for all of them.
//   1. scores: warps take keys round robin; each lane holds head_dim / 32 elements of q and k and
//      the warp reduces the dot products (fp32, scale folded into q).
//   2. softmax: per query head, max and sum of exp over the partition (one warp per head).
//   3. P V: warps take keys round robin again, lanes own head_dim / 32 output elements; the four
//      warps' partial sums are added through shared memory.
// A sequence with one partition writes bf16 out directly; otherwise the partial (normalized)
// outputs, max logits and exp sums go to the workspace and the reduce kernel merges them.
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/paged_attention.h"

namespace tandem::cuda {

namespace {
size_t NumPartitions(int max_context_len) {
  return max_context_len <= 0 ? 1 : (max_context_len + kDecodePartitionSize - 1) / kDecodePartitionSize;
}
}  // namespace

size_t PagedDecodeWorkspaceBytes(int num_seqs, int num_heads, int head_dim, int max_context_len) {
  const size_t parts = NumPartitions(max_context_len);
  if (parts <= 1) return 0;
  const size_t rows = static_cast<size_t>(num_seqs) * num_heads * parts;
  return sizeof(float) * (rows * head_dim + 2 * rows);
}

namespace detail {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kPart = kDecodePartitionSize;
constexpr int kMaxGroup = 8;  // query heads per block; larger groups use several blocks
constexpr int kUnroll = 4;    // keys in flight per warp

// EPL bf16 values (EPL = 2, 4, 8) at p -> fp32.
template <int EPL>
__device__ inline void LoadBf16(const __nv_bfloat16* p, float* out) {
  if constexpr (EPL == 8) {
    Bf16x8ToFloat(*reinterpret_cast<const uint4*>(p), out);
  } else if constexpr (EPL == 4) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.y));
    out[0] = a.x; out[1] = a.y; out[2] = b.x; out[3] = b.y;
  } else {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
    out[0] = a.x; out[1] = a.y;
  }
}

struct Workspace {
  float* partial_out;  // [num_seqs, num_heads, parts, head_dim]
  float* max_logits;   // [num_seqs, num_heads, parts]
  float* exp_sums;     // [num_seqs, num_heads, parts]
  int parts;
};

template <int HD, int G>
__global__ void __launch_bounds__(kThreads) PagedDecodeKernel(PagedDecodeArgs a, Workspace ws,
                                                              int num_chunks) {
  constexpr int EPL = HD / 32;
  constexpr int kScratch = (kPart > kWarps * HD ? kPart : kWarps * HD) * G;
  __shared__ __align__(16) float smem[kScratch];  // scores [G][kPart], then partial sums [4][G][HD]
  __shared__ float s_max[G], s_sum[G];

  const int seq = blockIdx.z;
  const int kvh = blockIdx.y / num_chunks;
  const int chunk = blockIdx.y % num_chunks;
  const int part = blockIdx.x;
  const int group = a.num_heads / a.num_kv_heads;
  const int g_count = min(G, group - chunk * G);
  const int h0 = kvh * group + chunk * G;  // first query head of this block
  const int ctx = a.context_lens[seq];
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int num_parts = ctx <= 0 ? 1 : (ctx + kPart - 1) / kPart;

  if (ctx <= 0) {  // nothing to attend to: zeros (callers never pass this)
    if (part == 0) {
      for (int i = threadIdx.x; i < g_count * HD; i += kThreads) {
        a.out[seq * a.out_stride + static_cast<int64_t>(h0 + i / HD) * HD + i % HD] =
            __float2bfloat16(0.0f);
      }
    }
    return;
  }
  const int start = part * kPart;
  if (start >= ctx) return;
  const int end = min(start + kPart, ctx);

  float q[G][EPL];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g < g_count) {
      LoadBf16<EPL>(a.q + seq * a.q_stride + static_cast<int64_t>(h0 + g) * HD + lane * EPL, q[g]);
#pragma unroll
      for (int e = 0; e < EPL; ++e) q[g][e] *= a.scale;
    } else {
#pragma unroll
      for (int e = 0; e < EPL; ++e) q[g][e] = 0.0f;
    }
  }
  const int64_t row_elems = static_cast<int64_t>(a.num_kv_heads) * HD;
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.block_table_stride;
  // Element offset of K (kv = 0) of position p for this lane; V is block_size rows further.
  auto k_offset = [&](int p) -> int64_t {
    const int64_t block = table[p / a.block_size];
    return (block * 2 * a.block_size + p % a.block_size) * row_elems +
           static_cast<int64_t>(kvh) * HD + lane * EPL;
  };
  const int64_t v_shift = static_cast<int64_t>(a.block_size) * row_elems;
  float* scores = smem;  // [G][kPart]

  // 1. scores
  for (int p0 = start + warp; p0 < end; p0 += kWarps * kUnroll) {
    float k[kUnroll][EPL];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = p0 + u * kWarps;
      if (p < end) LoadBf16<EPL>(a.kv_pool + k_offset(p), k[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = p0 + u * kWarps;
      if (p < end) {  // warp-uniform
#pragma unroll
        for (int g = 0; g < G; ++g) {
          float dot = 0.0f;
#pragma unroll
          for (int e = 0; e < EPL; ++e) dot += q[g][e] * k[u][e];
          dot = WarpSum(dot);
          if (lane == 0) scores[g * kPart + (p - start)] = dot;
        }
      }
    }
  }
  __syncthreads();

  // 2. softmax over the partition, one warp per query head.
  const int n = end - start;
  for (int g = warp; g < g_count; g += kWarps) {
    float* s = scores + g * kPart;
    float m = -INFINITY;
    for (int i = lane; i < n; i += 32) m = fmaxf(m, s[i]);
    m = WarpMax(m);
    float sum = 0.0f;
    for (int i = lane; i < n; i += 32) {
      const float e = expf(s[i] - m);
      s[i] = e;
      sum += e;
    }
    sum = WarpSum(sum);
    if (lane == 0) {
      s_max[g] = m;
      s_sum[g] = sum;
    }
  }
  __syncthreads();

  // 3. P V
  float acc[G][EPL];
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int e = 0; e < EPL; ++e) acc[g][e] = 0.0f;
  }
  for (int p0 = start + warp; p0 < end; p0 += kWarps * kUnroll) {
    float v[kUnroll][EPL];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = p0 + u * kWarps;
      if (p < end) LoadBf16<EPL>(a.kv_pool + k_offset(p) + v_shift, v[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = p0 + u * kWarps;
      if (p < end) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const float w = g < g_count ? scores[g * kPart + (p - start)] : 0.0f;
#pragma unroll
          for (int e = 0; e < EPL; ++e) acc[g][e] += w * v[u][e];
        }
      }
    }
  }
  __syncthreads();  // scores are dead; smem becomes the partial sums [kWarps][G][HD]
  float* partial = smem;
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int e = 0; e < EPL; ++e) partial[(warp * G + g) * HD + lane * EPL + e] = acc[g][e];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < g_count * HD; i += kThreads) {
    const int g = i / HD, d = i % HD;
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += partial[(w * G + g) * HD + d];
    o /= s_sum[g];
    const int h = h0 + g;
    if (num_parts == 1) {
      a.out[seq * a.out_stride + static_cast<int64_t>(h) * HD + d] = __float2bfloat16_rn(o);
    } else {
      const int64_t row = (static_cast<int64_t>(seq) * a.num_heads + h) * ws.parts + part;
      ws.partial_out[row * HD + d] = o;
      if (d == 0) {
        ws.max_logits[row] = s_max[g];
        ws.exp_sums[row] = s_sum[g];
      }
    }
  }
}

// Merges the partitions of sequences with more than one: grid (num_heads, num_seqs).
template <int HD>
__global__ void PagedDecodeReduceKernel(PagedDecodeArgs a, Workspace ws) {
  const int h = blockIdx.x;
  const int seq = blockIdx.y;
  const int ctx = a.context_lens[seq];
  const int num_parts = (ctx + kPart - 1) / kPart;
  if (num_parts <= 1) return;
  const int64_t base = (static_cast<int64_t>(seq) * a.num_heads + h) * ws.parts;
  float m = -INFINITY;
  for (int i = 0; i < num_parts; ++i) m = fmaxf(m, ws.max_logits[base + i]);
  float total = 0.0f;
  for (int i = 0; i < num_parts; ++i) total += ws.exp_sums[base + i] * expf(ws.max_logits[base + i] - m);
  const float inv_total = 1.0f / total;
  for (int d = threadIdx.x; d < HD; d += blockDim.x) {
    float o = 0.0f;
    for (int i = 0; i < num_parts; ++i) {
      const float w = ws.exp_sums[base + i] * expf(ws.max_logits[base + i] - m);
      o += w * ws.partial_out[(base + i) * HD + d];
    }
    a.out[seq * a.out_stride + static_cast<int64_t>(h) * HD + d] = __float2bfloat16_rn(o * inv_total);
  }
}

template <int HD>
cudaError_t LaunchHd(const PagedDecodeArgs& a, const Workspace& ws, cudaStream_t stream) {
  const int group = a.num_heads / a.num_kv_heads;
  const int num_chunks_8 = (group + kMaxGroup - 1) / kMaxGroup;
  const int per_block = group >= kMaxGroup ? kMaxGroup : group;
  const int g = per_block <= 1 ? 1 : per_block <= 2 ? 2 : per_block <= 4 ? 4 : 8;
  const int num_chunks = g == kMaxGroup ? num_chunks_8 : 1;
  const dim3 grid(ws.parts, a.num_kv_heads * num_chunks, a.num_seqs);
  void (*kernel)(PagedDecodeArgs, Workspace, int) =
      g == 1 ? PagedDecodeKernel<HD, 1>
      : g == 2 ? PagedDecodeKernel<HD, 2>
      : g == 4 ? PagedDecodeKernel<HD, 4>
               : PagedDecodeKernel<HD, 8>;
  TANDEM_LAUNCH(kernel, grid, kThreads, 0, stream, a, ws, num_chunks);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || ws.parts <= 1) return err;
  TANDEM_LAUNCH(PagedDecodeReduceKernel<HD>, dim3(a.num_heads, a.num_seqs), HD < 128 ? HD : 128, 0,
                stream, a, ws);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchPagedDecode(const PagedDecodeArgs& a, cudaStream_t stream) {
  if (a.num_seqs == 0) return cudaSuccess;
  Workspace ws{};
  ws.parts = static_cast<int>(NumPartitions(a.max_context_len));
  if (ws.parts > 1) {
    const size_t rows = static_cast<size_t>(a.num_seqs) * a.num_heads * ws.parts;
    if (a.workspace == nullptr ||
        a.workspace_bytes < PagedDecodeWorkspaceBytes(a.num_seqs, a.num_heads, a.head_dim,
                                                      a.max_context_len)) {
      return cudaErrorInvalidValue;
    }
    ws.partial_out = static_cast<float*>(a.workspace);
    ws.max_logits = ws.partial_out + rows * a.head_dim;
    ws.exp_sums = ws.max_logits + rows;
  }
  switch (a.head_dim) {
    case 64: return LaunchHd<64>(a, ws, stream);
    case 128: return LaunchHd<128>(a, ws, stream);
    case 256: return LaunchHd<256>(a, ws, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace detail
}  // namespace tandem::cuda
