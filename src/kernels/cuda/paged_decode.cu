// PagedDecode (paged_attention.h): one query per sequence, the context split over CTAs.
//
// Grid (num_splits, KV head x query-head chunk, sequence); 4 warps per CTA. A CTA serves up to
// kMaxGroup query heads sharing one KV head, so each K/V row is read once for all of them. Sequence
// s's context is cut into at most num_splits chunks (SplitLayout: chunks of >= min_chunk keys, a
// multiple of 32), CTAs past the last chunk exit at once: the grid depends on the batch only, not
// on the contexts (what a CUDA graph needs).
//
// Inside a CTA the keys go to "key groups" of head_dim / 8 lanes: each lane holds 8 elements (one
// 16-byte load) of q, k, v and the output; the q.k dot is reduced over the key group's lanes by
// shuffles. Every key group keeps its own online softmax (max, exp sum, output accumulator, flash-
// decoding style) over keys kNumGroups apart, kUnroll keys in flight; at the end the CTA merges the
// key groups through shared memory. Registers: <= 128 at groups <= 4 (launch bounds: 4 CTAs per
// SM, what kFill's wave assumes), 0 spills.
// One chunk: bf16 out directly; several: the chunk's normalized output, max logit and exp sum go
// to the workspace, and either the last CTA of the (sequence, KV head, head chunk) to finish merges
// them (kFill: a ticket counter per group in the workspace, reset by that CTA) or the reduce kernel
// does (kLegacy, a workspace not initialized, or more groups than counters); log-sum-exp weights
// either way.
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/paged_decode_split.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tandem::cuda {
namespace {

constexpr int kMinChunkFill = 32;    // keys: one CTA iteration at head_dim 128, group <= 4
constexpr int kMinChunkLegacy = 64;
constexpr int kMaxSplitsAuto = 64;   // upper bound of the automatic choice
constexpr int kMaxGroup = 8;         // query heads per CTA; larger groups use several CTAs
constexpr size_t kCounterBytes = sizeof(unsigned) * kPagedDecodeCounters;

int NumChunks(int num_heads, int num_kv_heads) {
  const int group = num_heads / num_kv_heads;
  return group > kMaxGroup ? (group + kMaxGroup - 1) / kMaxGroup : 1;
}

constexpr int kMinChunkMma = 64;  // keys: one 16-key tile per warp
constexpr int kMaxGroupMma = 16;  // query heads of one KV head: the rows of an m16 tile

// TANDEM_DECODE_KERNEL, read once: mma, simt, mma-pairs, mma-fp8-tile, mma-global, or kAuto (unset or
// anything else).
DecodeKernel EnvKernel() {
  static const DecodeKernel k = [] {
    const char* v = std::getenv("TANDEM_DECODE_KERNEL");
    if (v != nullptr && std::strcmp(v, "mma") == 0) return DecodeKernel::kMma;
    if (v != nullptr && std::strcmp(v, "simt") == 0) return DecodeKernel::kSimt;
    if (v != nullptr && std::strcmp(v, "mma-pairs") == 0) return DecodeKernel::kMmaPairLoads;
    if (v != nullptr && std::strcmp(v, "mma-fp8-tile") == 0) return DecodeKernel::kMmaFp8Tile;
    if (v != nullptr && std::strcmp(v, "mma-global") == 0) return DecodeKernel::kMmaGlobalMerge;
    return DecodeKernel::kAuto;
  }();
  return k;
}

// TANDEM_DECODE_SPLITS, read once: the policy and a fixed split count (0: none).
struct EnvChoice {
  DecodeSplitPolicy policy = DecodeSplitPolicy::kLegacy;
  int splits = 0;
};
const EnvChoice& Env() {
  static const EnvChoice env = [] {
    EnvChoice e;
    const char* v = std::getenv("TANDEM_DECODE_SPLITS");
    if (v == nullptr || *v == '\0' || std::strcmp(v, "legacy") == 0) return e;
    if (std::strcmp(v, "fill") == 0) {
      e.policy = DecodeSplitPolicy::kFill;
      return e;
    }
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end != v && *end == '\0' && n >= 1 && n <= kPagedDecodeMaxSplits) {
      e.splits = static_cast<int>(n);
    } else {
      std::fprintf(stderr, "TANDEM_DECODE_SPLITS=%s not understood (legacy, fill or 1..%d): "
                   "using legacy\n", v, kPagedDecodeMaxSplits);
    }
    return e;
  }();
  return env;
}

}  // namespace

DecodeSplitPolicy PagedDecodeResolvePolicy(DecodeSplitPolicy policy) {
  return policy == DecodeSplitPolicy::kAuto ? Env().policy : policy;
}

int PagedDecodeChooseSplits(int num_seqs, int num_heads, int num_kv_heads, int max_context_len,
                            int num_sms, DecodeSplitPolicy policy) {
  if (num_seqs <= 0 || num_kv_heads <= 0 || num_heads <= 0 || num_sms <= 0) return 1;
  const bool legacy = PagedDecodeResolvePolicy(policy) == DecodeSplitPolicy::kLegacy;
  const int64_t per_split = int64_t{num_seqs} * num_kv_heads * NumChunks(num_heads, num_kv_heads);
  if (per_split >= 2 * int64_t{num_sms}) return 1;
  const int64_t target = (legacy ? 2 : 4) * int64_t{num_sms};
  const int min_chunk = legacy ? kMinChunkLegacy : kMinChunkFill;
  int64_t splits = (target + per_split - 1) / per_split;
  splits = std::min<int64_t>(splits, (int64_t{max_context_len} + min_chunk - 1) / min_chunk);
  splits = std::min<int64_t>(splits, kMaxSplitsAuto);
  return splits < 1 ? 1 : static_cast<int>(splits);
}

int PagedDecodeChooseMmaSplits(int num_seqs, int num_kv_heads, int max_context_len, int num_sms,
                               int ctas_per_sm) {
  if (num_seqs <= 0 || num_kv_heads <= 0 || num_sms <= 0 || ctas_per_sm <= 0) return 1;
  const int64_t per_split = int64_t{num_seqs} * num_kv_heads;
  const int64_t slots = int64_t{ctas_per_sm} * num_sms;
  int64_t splits = slots / per_split;
  splits = std::min<int64_t>(splits, (int64_t{max_context_len} + kMinChunkMma - 1) / kMinChunkMma);
  splits = std::min<int64_t>(splits, kMaxSplitsAuto);
  return splits < 1 ? 1 : static_cast<int>(splits);
}

namespace detail {

int PagedDecodeMmaStages(int head_dim, const DeviceLimits& d) {
  constexpr size_t kReserved = 1024;  // shared memory the runtime keeps per CTA
  const size_t three = decode::MmaSmemBytes(head_dim, 3), two = decode::MmaSmemBytes(head_dim, 2);
  if (three > 0 && three <= d.smem_per_block_optin && 2 * (three + kReserved) <= d.smem_per_sm) return 3;
  if (two > 0 && two <= d.smem_per_block_optin && two + kReserved <= d.smem_per_sm) return 2;
  return 0;
}

int PagedDecodeMmaCtasPerSm(int head_dim, const DeviceLimits& d) {
  const int stages = PagedDecodeMmaStages(head_dim, d);
  if (stages == 0) return 0;
  const size_t per_cta = decode::MmaSmemBytes(head_dim, stages) + 1024;
  return static_cast<int>(std::min<size_t>(d.smem_per_sm / per_cta, 4));
}

int PagedDecodeClusterSplitsMax(int head_dim) {
  const DeviceLimits& d = CurrentDeviceLimits();
  const int stages = PagedDecodeMmaStages(head_dim, d);
  return stages > 0 ? decode::MmaClusterSplitsMax(head_dim, stages) : 0;
}

bool PagedDecodeUsesCluster(const PagedDecodeArgs& a) {
  if (a.kv_pool_fp8 != nullptr || ChoosePagedDecodeKernel(a, CurrentDeviceLimits()) != DecodeKernel::kMma) {
    return false;
  }
  const int splits = PagedDecodeSplits(a);
  return splits >= 2 && splits <= PagedDecodeClusterSplitsMax(a.head_dim);
}

bool PagedDecodeMmaFits(int num_heads, int num_kv_heads, int head_dim, const DeviceLimits& d) {
  if (num_kv_heads <= 0) return false;
  const int group = num_heads / num_kv_heads;
  return d.cc_major >= 8 && group >= 1 && group <= kMaxGroupMma && PagedDecodeMmaStages(head_dim, d) > 0;
}

DecodeKernel ChoosePagedDecodeKernel(const PagedDecodeArgs& a, const DeviceLimits& d) {
  // An FP8 pool has the mma kernels only (PagedDecode refuses it where they do not fit): the one
  // with fragments from the codes (kMma), or the one with a converted tile (kMmaFp8Tile).
  const DecodeKernel requested = a.kernel != DecodeKernel::kAuto ? a.kernel : EnvKernel();
  const DecodeKernel asked = a.kv_pool_fp8 == nullptr                     ? requested
                             : requested == DecodeKernel::kMmaFp8Tile ? requested
                                                                          : DecodeKernel::kMma;
  if (asked == DecodeKernel::kSimt || !PagedDecodeMmaFits(a.num_heads, a.num_kv_heads, a.head_dim, d)) {
    return DecodeKernel::kSimt;
  }
  if (asked == DecodeKernel::kMmaPairLoads || asked == DecodeKernel::kMmaGlobalMerge) return asked;
  return asked == DecodeKernel::kMmaFp8Tile && a.kv_pool_fp8 != nullptr ? asked : DecodeKernel::kMma;
}

}  // namespace detail

int PagedDecodeSplits(const PagedDecodeArgs& a) {
  if (a.num_splits > 0) return a.num_splits;
  if (a.policy == DecodeSplitPolicy::kAuto && Env().splits > 0) return Env().splits;
  const DeviceLimits& d = CurrentDeviceLimits();
  const DecodeKernel kernel = detail::ChoosePagedDecodeKernel(a, d);
  if (kernel != DecodeKernel::kSimt) {
    const int splits = PagedDecodeChooseMmaSplits(a.num_seqs, a.num_kv_heads, a.max_context_len, d.sm_count,
                                                  detail::PagedDecodeMmaCtasPerSm(a.head_dim, d));
    // The cluster merge's cap (kMma over bf16): fewer, longer splits merged without the workspace.
    const int cap = kernel == DecodeKernel::kMma && a.kv_pool_fp8 == nullptr
                        ? detail::PagedDecodeClusterSplitsMax(a.head_dim)
                        : 0;
    return cap > 0 ? std::min(splits, cap) : splits;
  }
  return PagedDecodeChooseSplits(a.num_seqs, a.num_heads, a.num_kv_heads, a.max_context_len,
                                 d.sm_count, a.policy);
}

size_t PagedDecodeWorkspaceBytes(const PagedDecodeArgs& a) {
  const size_t splits = static_cast<size_t>(PagedDecodeSplits(a));
  if (splits <= 1 || a.num_seqs <= 0) return 0;
  const size_t rows = static_cast<size_t>(a.num_seqs) * a.num_heads * splits;
  return kCounterBytes + sizeof(float) * (rows * a.head_dim + 2 * rows);
}

namespace detail {
namespace {

using namespace decode;  // NOLINT: the split layout, workspace and merge of both kernels

template <int HD, int G>
__global__ void __launch_bounds__(kThreads, G >= 8 ? 2 : 4)
    PagedDecodeKernel(PagedDecodeArgs a, Workspace ws, int num_chunks) {
  // A GEMV launched programmatically after this kernel (LinearArgs::programmatic_launch) may
  // start fetching its weights now; it reads this kernel's output only after its wait.
  TriggerDependents();
  constexpr int kLanesPerKey = HD / 8;                 // 8, 16 or 32
  constexpr int kKeysPerWarp = 32 / kLanesPerKey;      // 4, 2 or 1
  constexpr int kNumGroups = kWarps * kKeysPerWarp;    // key groups per CTA
  constexpr int kUnroll = G >= 8 ? 2 : 4;              // keys in flight per key group
  constexpr int kStep = kNumGroups * kUnroll;          // keys per CTA iteration
  // kNumGroups * HD = 1024 for every HD: s_acc holds 1024 * G floats, enough for the merge's
  // 2 * G * kPagedDecodeMaxSplits once the key groups are merged.
  static_assert(kNumGroups * HD >= 2 * kPagedDecodeMaxSplits, "merge scratch");
  __shared__ __align__(16) float s_acc[kNumGroups][G][HD];
  __shared__ float s_m[kNumGroups][G], s_l[kNumGroups][G];
  __shared__ unsigned s_ticket;

  const int seq = blockIdx.z;
  const int kvh = blockIdx.y / num_chunks;
  const int head_chunk = blockIdx.y % num_chunks;
  const int split = blockIdx.x;
  const int group = a.num_heads / a.num_kv_heads;
  const int g_count = min(G, group - head_chunk * G);
  const int h0 = kvh * group + head_chunk * G;  // first query head of this CTA
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int kg = warp * kKeysPerWarp + lane / kLanesPerKey;  // key group
  const int li = lane % kLanesPerKey;                        // lane in the key group: dims li*8..+8

  int start = 0, end = 0, used = 0;
  if (!CtaChunk<HD>(a, ws, seq, split, h0, g_count, &start, &end, &used)) return;
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.block_table_stride;

  float q[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g < g_count) {
      Bf16x8ToFloat(*reinterpret_cast<const uint4*>(
                        a.q + seq * a.q_stride + static_cast<int64_t>(h0 + g) * HD + li * 8),
                    q[g]);
#pragma unroll
      for (int e = 0; e < 8; ++e) q[g][e] *= a.scale;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) q[g][e] = 0.0f;
    }
  }
  float m[G], l[G], acc[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.0f;
  }
  const int64_t row_elems = static_cast<int64_t>(a.num_kv_heads) * HD;
  const int64_t v_shift = static_cast<int64_t>(a.block_size) * row_elems;
  const __nv_bfloat16* pool = a.kv_pool + static_cast<int64_t>(kvh) * HD + li * 8;

  // The loop bound is per warp (warp-uniform) so the shuffles always see every lane.
  for (int base = start + warp * kKeysPerWarp; base < end; base += kStep) {
    uint4 kr[kUnroll], vr[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = base + (lane / kLanesPerKey) + u * kNumGroups;
      if (p < end) {
        const int64_t blk = table[p / a.block_size];
        const int64_t off = (blk * 2 * a.block_size + p % a.block_size) * row_elems;
        kr[u] = *reinterpret_cast<const uint4*>(pool + off);
        vr[u] = *reinterpret_cast<const uint4*>(pool + off + v_shift);
      } else {
        kr[u] = make_uint4(0, 0, 0, 0);
        vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
    float s[kUnroll][G];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float k[8];
      Bf16x8ToFloat(kr[u], k);
      const bool valid = base + (lane / kLanesPerKey) + u * kNumGroups < end;
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) dot += q[g][e] * k[e];
#pragma unroll
        for (int o = kLanesPerKey / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(kFullMask, dot, o);
        s[u][g] = valid ? dot : -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float mt = s[0][g];
#pragma unroll
      for (int u = 1; u < kUnroll; ++u) mt = fmaxf(mt, s[u][g]);
      const float m_new = fmaxf(m[g], mt);
      if (m_new == -INFINITY) continue;  // no valid key for this key group yet
      const float corr = expf(m[g] - m_new);
      l[g] *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[g][e] *= corr;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float p = expf(s[u][g] - m_new);
        float v[8];
        Bf16x8ToFloat(vr[u], v);
        l[g] += p;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] += p * v[e];
      }
      m[g] = m_new;
    }
  }

  // Merge the key groups.
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int e = 0; e < 8; ++e) s_acc[kg][g][li * 8 + e] = acc[g][e];
    if (li == 0) {
      s_m[kg][g] = m[g];
      s_l[kg][g] = l[g];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < g_count * HD; i += kThreads) {
    const int g = i / HD, d = i % HD;
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < kNumGroups; ++k) mx = fmaxf(mx, s_m[k][g]);
    float sum = 0.0f, o = 0.0f;
#pragma unroll
    for (int k = 0; k < kNumGroups; ++k) {
      const float w = s_m[k][g] == -INFINITY ? 0.0f : expf(s_m[k][g] - mx);
      sum += w * s_l[k][g];
      o += w * s_acc[k][g][d];
    }
    o /= sum;
    const int h = h0 + g;
    if (used == 1) {
      a.out[seq * a.out_stride + static_cast<int64_t>(h) * HD + d] = __float2bfloat16_rn(o);
    } else {
      const int64_t row = (static_cast<int64_t>(seq) * a.num_heads + h) * ws.splits + split;
      ws.partial_out[row * HD + d] = o;
      if (d == 0) {
        ws.max_logits[row] = mx;
        ws.exp_sums[row] = sum;
      }
    }
  }
  if (used == 1 || !ws.merge_in_kernel) return;

  // Split results: the last CTA of this (sequence, KV head, head chunk) to finish merges them.
  // (s_acc is free once LastToFinish has synchronized the CTA.)
  if (!LastToFinish(ws, seq, used, &s_ticket)) return;
  MergeSplits<HD, G>(a, ws, seq, h0, g_count, used, &s_acc[0][0][0]);
}

// Merges the chunks of sequences with more than one: grid (num_heads, num_seqs).
template <int HD>
__global__ void PagedDecodeReduceKernel(PagedDecodeArgs a, Workspace ws) {
  // A GEMV launched programmatically after this kernel (LinearArgs::programmatic_launch) may
  // start fetching its weights now; it reads this kernel's output only after its wait.
  TriggerDependents();
  __shared__ float s_w[kPagedDecodeMaxSplits];
  const int h = blockIdx.x;
  const int seq = blockIdx.y;
  const int ctx = a.context_lens[seq];
  if (ctx <= 0) return;
  int chunk = 0, used = 0;
  SplitLayout(ctx, ws.splits, ws.min_chunk, &chunk, &used);
  if (used <= 1) return;
  const int64_t base = (static_cast<int64_t>(seq) * a.num_heads + h) * ws.splits;
  float mx = -INFINITY;
  for (int i = 0; i < used; ++i) mx = fmaxf(mx, ws.max_logits[base + i]);
  float total = 0.0f;
  for (int i = 0; i < used; ++i) total += ws.exp_sums[base + i] * expf(ws.max_logits[base + i] - mx);
  for (int i = threadIdx.x; i < used; i += blockDim.x) {
    s_w[i] = ws.exp_sums[base + i] * expf(ws.max_logits[base + i] - mx) / total;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < HD; d += blockDim.x) {
    float o = 0.0f;
    for (int i = 0; i < used; ++i) o += s_w[i] * ws.partial_out[(base + i) * HD + d];
    a.out[seq * a.out_stride + static_cast<int64_t>(h) * HD + d] = __float2bfloat16_rn(o);
  }
}

template <int HD>
cudaError_t LaunchReduce(const PagedDecodeArgs& a, const Workspace& ws, cudaStream_t stream) {
  TANDEM_LAUNCH(PagedDecodeReduceKernel<HD>, dim3(a.num_heads, a.num_seqs), HD < 128 ? HD : 128, 0,
                stream, a, ws);
  return cudaGetLastError();
}

template <int HD>
cudaError_t LaunchHd(const PagedDecodeArgs& a, const Workspace& ws, int num_chunks,
                     cudaStream_t stream) {
  const int group = a.num_heads / a.num_kv_heads;
  const int per_cta = group >= kMaxGroup ? kMaxGroup : group;
  const int g = per_cta <= 1 ? 1 : per_cta <= 2 ? 2 : per_cta <= 4 ? 4 : 8;
  const dim3 grid(ws.splits, a.num_kv_heads * num_chunks, a.num_seqs);
  void (*kernel)(PagedDecodeArgs, Workspace, int) =
      g == 1 ? PagedDecodeKernel<HD, 1>
      : g == 2 ? PagedDecodeKernel<HD, 2>
      : g == 4 ? PagedDecodeKernel<HD, 4>
               : PagedDecodeKernel<HD, 8>;
  TANDEM_LAUNCH(kernel, grid, kThreads, 0, stream, a, ws, num_chunks);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || ws.splits <= 1 || ws.merge_in_kernel) return err;
  return LaunchReduce<HD>(a, ws, stream);
}

__global__ void ZeroWordsKernel(unsigned* p, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = 0;
}

}  // namespace

cudaError_t LaunchPagedDecodeInitWorkspace(void* workspace, size_t bytes, cudaStream_t stream) {
  const size_t words = std::min(bytes, kCounterBytes) / sizeof(unsigned);
  if (words == 0) return cudaSuccess;
  TANDEM_LAUNCH(ZeroWordsKernel, 8, 256, 0, stream, static_cast<unsigned*>(workspace),
                static_cast<int>(words));
  return cudaGetLastError();
}

cudaError_t LaunchPagedDecode(const PagedDecodeArgs& a, cudaStream_t stream) {
  if (a.num_seqs == 0) return cudaSuccess;
  const DeviceLimits& d = CurrentDeviceLimits();
  const DecodeKernel kernel = ChoosePagedDecodeKernel(a, d);
  const bool mma = kernel != DecodeKernel::kSimt;
  // The mma kernel merges in the kernel whenever it can (the policy picks the SIMT kernel's).
  const bool legacy = !mma && PagedDecodeResolvePolicy(a.policy) == DecodeSplitPolicy::kLegacy;
  const int num_chunks = mma ? 1 : NumChunks(a.num_heads, a.num_kv_heads);
  Workspace ws{};
  ws.splits = PagedDecodeSplits(a);
  ws.min_chunk = mma ? kMinChunkMma : legacy ? kMinChunkLegacy : kMinChunkFill;
  if (ws.splits > kPagedDecodeMaxSplits) return cudaErrorInvalidValue;
  if (ws.splits > 1) {
    const size_t rows = static_cast<size_t>(a.num_seqs) * a.num_heads * ws.splits;
    if (a.workspace == nullptr || a.workspace_bytes < PagedDecodeWorkspaceBytes(a)) {
      return cudaErrorInvalidValue;
    }
    ws.counters = static_cast<unsigned*>(a.workspace);
    ws.partial_out = reinterpret_cast<float*>(static_cast<char*>(a.workspace) + kCounterBytes);
    ws.max_logits = ws.partial_out + rows * a.head_dim;
    ws.exp_sums = ws.max_logits + rows;
    ws.merge_in_kernel = !legacy && a.workspace_initialized &&
                         int64_t{a.num_seqs} * a.num_kv_heads * num_chunks <= kPagedDecodeCounters;
  }
  if (mma) {
    PagedDecodeArgs chosen = a;  // kAuto resolved: which loads the mma kernel uses
    chosen.kernel = kernel;
    const int stages = PagedDecodeMmaStages(a.head_dim, d);
    if (PagedDecodeUsesCluster(a)) return LaunchPagedDecodeMmaCluster(chosen, ws, stages, stream);
    cudaError_t err = LaunchPagedDecodeMma(chosen, ws, stages, stream);
    if (err != cudaSuccess || ws.splits <= 1 || ws.merge_in_kernel) return err;
    return a.head_dim == 64 ? LaunchReduce<64>(a, ws, stream) : LaunchReduce<128>(a, ws, stream);
  }
  switch (a.head_dim) {
    case 64: return LaunchHd<64>(a, ws, num_chunks, stream);
    case 128: return LaunchHd<128>(a, ws, num_chunks, stream);
    case 256: return LaunchHd<256>(a, ws, num_chunks, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace detail
}  // namespace tandem::cuda
