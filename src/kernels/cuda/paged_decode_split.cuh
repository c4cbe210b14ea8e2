// What the two PagedDecode kernels share (included only by paged_decode.cu and
// paged_decode_mma.cu): the split of a context into chunks, the workspace of split results, and
// the merge of a (sequence, KV head, head chunk)'s splits by the last CTA to finish (log-sum-exp
// weights, as in flash-decoding). Both kernels run 128 threads (4 warps) per CTA.
#pragma once

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/paged_attention.h"

namespace tandem::cuda::detail {
namespace decode {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;

// Cross-CTA primitives of the kFill merge. The CPU emulator (dev/kernels/emu) runs one block after
// another, so plain operations are exact there.
struct Float4 {
  float x, y, z, w;
};
#ifdef TANDEM_CUDA_EMU
inline unsigned TakeTicket(unsigned* counter) { return (*counter)++; }
inline void FenceDevice() {}
inline float LoadL2(const float* p) { return *p; }
inline Float4 LoadL2x4(const float* p) { return {p[0], p[1], p[2], p[3]}; }
#else
__device__ inline unsigned TakeTicket(unsigned* counter) { return atomicAdd(counter, 1u); }
__device__ inline void FenceDevice() { __threadfence(); }
__device__ inline float LoadL2(const float* p) { return __ldcg(p); }  // not through L1
// Four floats at a 16-byte aligned address, one load, not through L1.
__device__ inline Float4 LoadL2x4(const float* p) {
  const float4 v = __ldcg(reinterpret_cast<const float4*>(p));
  return {v.x, v.y, v.z, v.w};
}
#endif

// The chunk of a context of `ctx` keys cut into at most `splits` parts: `chunk` keys each (the
// last one shorter), `used` parts. Both kernels call this, so they agree.
__device__ inline void SplitLayout(int ctx, int splits, int min_chunk, int* chunk, int* used) {
  int c = (ctx + splits - 1) / splits;
  c = (c + 31) / 32 * 32;
  c = c < min_chunk ? min_chunk : c;
  *chunk = c;
  *used = (ctx + c - 1) / c;
}

struct Workspace {
  unsigned* counters;  // [num_seqs * gridDim.y] when merge_in_kernel (zero between launches)
  float* partial_out;  // [num_seqs, num_heads, splits, head_dim], normalized per chunk
  float* max_logits;   // [num_seqs, num_heads, splits]
  float* exp_sums;     // [num_seqs, num_heads, splits]
  int splits;
  int min_chunk;
  bool merge_in_kernel;  // the last CTA of a group merges (else PagedDecodeReduceKernel)
};

// The keys [*start, *end) of sequence seq's context that split `split` covers and the number of
// splits its context uses (*used); false when this CTA has nothing to do: past the last split, or an
// empty context (callers never pass one), whose g_count heads from h0 the split-0 CTA zeroes.
template <int HD>
__device__ inline bool CtaChunk(const PagedDecodeArgs& a, const Workspace& ws, int seq, int split,
                                int h0, int g_count, int* start, int* end, int* used) {
  const int ctx = a.context_lens[seq];
  if (ctx <= 0) {
    if (split == 0) {
      for (int i = threadIdx.x; i < g_count * HD; i += kThreads) {
        a.out[seq * a.out_stride + static_cast<int64_t>(h0 + i / HD) * HD + i % HD] =
            __float2bfloat16(0.0f);
      }
    }
    return false;
  }
  int chunk = 0;
  SplitLayout(ctx, ws.splits, ws.min_chunk, &chunk, used);
  if (split >= *used) return false;
  *start = split * chunk;
  *end = min(*start + chunk, ctx);
  return true;
}

// The last CTA of a (sequence, KV head, head chunk) merges the `used` partial results of its
// g_count heads into bf16 out. `scratch` (2 * G * kPagedDecodeMaxSplits floats) is free shared
// memory. Every thread of the CTA calls this.
template <int HD, int G>
__device__ void MergeSplits(const PagedDecodeArgs& a, const Workspace& ws, int seq, int h0,
                            int g_count, int used, float* scratch) {
  float* s_w = scratch;                                // [G][max splits]: max logit, then weight
  float* s_l = scratch + G * kPagedDecodeMaxSplits;    // [G][max splits]: exp sum
  const int64_t head_row0 = (static_cast<int64_t>(seq) * a.num_heads + h0) * ws.splits;
  for (int i = threadIdx.x; i < g_count * used; i += kThreads) {
    const int g = i / used, sp = i % used;
    const int64_t r = head_row0 + static_cast<int64_t>(g) * ws.splits + sp;
    s_w[g * kPagedDecodeMaxSplits + sp] = LoadL2(ws.max_logits + r);
    s_l[g * kPagedDecodeMaxSplits + sp] = LoadL2(ws.exp_sums + r);
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int g = warp; g < g_count; g += kWarps) {  // a warp per head: weights l_i e^(m_i - M) / sum
    float* w = s_w + g * kPagedDecodeMaxSplits;
    const float* l = s_l + g * kPagedDecodeMaxSplits;
    float mx = -INFINITY;
    for (int sp = lane; sp < used; sp += 32) mx = fmaxf(mx, w[sp]);
    mx = WarpMax(mx);
    float total = 0.0f;
    for (int sp = lane; sp < used; sp += 32) {
      total += w[sp] == -INFINITY ? 0.0f : l[sp] * expf(w[sp] - mx);
    }
    total = WarpSum(total);
    __syncwarp();  // every lane has read w[] before it is overwritten
    for (int sp = lane; sp < used; sp += 32) {
      w[sp] = w[sp] == -INFINITY ? 0.0f : l[sp] * expf(w[sp] - mx) / total;
    }
  }
  __syncthreads();
  // Each thread 4 adjacent dimensions of a head (16-byte loads), 8 splits' loads in flight: at
  // 4 heads x 128 dims one pass of the 128 threads, used / 8 round trips to L2 (the loop of one
  // float and 4 loads in flight made 4 passes of used / 4 each, 32 round trips at 32 splits).
  constexpr int kVec = 4, kInFlight = 8;
  static_assert(HD % kVec == 0);
  for (int i = threadIdx.x; i < g_count * (HD / kVec); i += kThreads) {
    const int g = i / (HD / kVec), d = (i % (HD / kVec)) * kVec;
    const float* w = s_w + g * kPagedDecodeMaxSplits;
    const float* src = ws.partial_out + (head_row0 + static_cast<int64_t>(g) * ws.splits) * HD + d;
    Float4 acc{0.0f, 0.0f, 0.0f, 0.0f};
    auto add = [&acc](float wt, const Float4& v) {
      acc.x += wt * v.x;
      acc.y += wt * v.y;
      acc.z += wt * v.z;
      acc.w += wt * v.w;
    };
    int sp = 0;
    for (; sp + kInFlight <= used; sp += kInFlight) {
      Float4 v[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) v[u] = LoadL2x4(src + static_cast<int64_t>(sp + u) * HD);
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) add(w[sp + u], v[u]);
    }
    for (; sp < used; ++sp) add(w[sp], LoadL2x4(src + static_cast<int64_t>(sp) * HD));
    __nv_bfloat16* o = a.out + seq * a.out_stride + static_cast<int64_t>(h0 + g) * HD + d;
    o[0] = __float2bfloat16_rn(acc.x);
    o[1] = __float2bfloat16_rn(acc.y);
    o[2] = __float2bfloat16_rn(acc.z);
    o[3] = __float2bfloat16_rn(acc.w);
  }
}

// After a CTA wrote its split result (every thread calls this): true in the last CTA of the
// (sequence, blockIdx.y) group to finish, which then merges; its counter is reset for the next
// launch. threadFenceReduction: each thread's partial writes are visible before its ticket.
__device__ inline bool LastToFinish(const Workspace& ws, int seq, int used, unsigned* s_ticket) {
  FenceDevice();
  __syncthreads();
  unsigned* counter = ws.counters + static_cast<int64_t>(seq) * gridDim.y + blockIdx.y;
  if (threadIdx.x == 0) *s_ticket = TakeTicket(counter);
  __syncthreads();
  if (*s_ticket != static_cast<unsigned>(used - 1)) return false;
  FenceDevice();
  if (threadIdx.x == 0) *counter = 0;  // every other CTA of the group has taken its ticket
  return true;
}

// paged_decode_mma.cu: the tensor-core kernel's dynamic shared memory (bytes; 0 for a head_dim
// other than 64 and 128 or stages other than 2 and 3) and its launch (then the reduce kernel, as
// for the SIMT kernel, when ws.splits > 1 and !ws.merge_in_kernel).
size_t MmaSmemBytes(int head_dim, int stages);
cudaError_t LaunchPagedDecodeMma(const PagedDecodeArgs& a, const Workspace& ws, int stages,
                                 cudaStream_t stream);
// The same kernel merging its splits in a thread-block cluster of ws.splits CTAs (sm_90, bf16
// pool, 2 <= ws.splits <= kPagedDecodeMaxClusterSplits; no workspace used), and the largest cluster
// size it may launch with on the current device (MmaClusterSplitsMax: 16, 8 or 0, see
// PagedDecodeClusterSplitsMax).
cudaError_t LaunchPagedDecodeMmaCluster(const PagedDecodeArgs& a, const Workspace& ws, int stages,
                                        cudaStream_t stream);
int MmaClusterSplitsMax(int head_dim, int stages);
// paged_decode_fp8.cu: the FP8 kernel with fragments straight from the codes (head_dim 64 or 128),
// its ring: PagedDecodeFp8Ring (paged_attention.h).
cudaError_t LaunchPagedDecodeFp8(const PagedDecodeArgs& a, const Workspace& ws, cudaStream_t stream);

}  // namespace decode
}  // namespace tandem::cuda::detail
