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
#ifdef TANDEM_CUDA_EMU
inline unsigned TakeTicket(unsigned* counter) { return (*counter)++; }
inline void FenceDevice() {}
inline float LoadL2(const float* p) { return *p; }
#else
__device__ inline unsigned TakeTicket(unsigned* counter) { return atomicAdd(counter, 1u); }
__device__ inline void FenceDevice() { __threadfence(); }
__device__ inline float LoadL2(const float* p) { return __ldcg(p); }  // not through L1
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
  for (int i = threadIdx.x; i < g_count * HD; i += kThreads) {
    const int g = i / HD, d = i % HD;
    const float* w = s_w + g * kPagedDecodeMaxSplits;
    const float* src = ws.partial_out + (head_row0 + static_cast<int64_t>(g) * ws.splits) * HD + d;
    float o0 = 0.0f, o1 = 0.0f, o2 = 0.0f, o3 = 0.0f;  // four independent loads in flight
    int sp = 0;
    for (; sp + 4 <= used; sp += 4) {
      o0 += w[sp] * LoadL2(src + static_cast<int64_t>(sp) * HD);
      o1 += w[sp + 1] * LoadL2(src + static_cast<int64_t>(sp + 1) * HD);
      o2 += w[sp + 2] * LoadL2(src + static_cast<int64_t>(sp + 2) * HD);
      o3 += w[sp + 3] * LoadL2(src + static_cast<int64_t>(sp + 3) * HD);
    }
    for (; sp < used; ++sp) o0 += w[sp] * LoadL2(src + static_cast<int64_t>(sp) * HD);
    a.out[seq * a.out_stride + static_cast<int64_t>(h0 + g) * HD + d] =
        __float2bfloat16_rn((o0 + o1) + (o2 + o3));
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

}  // namespace decode
}  // namespace tandem::cuda::detail
