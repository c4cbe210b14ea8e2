// What the two tensor-core PagedDecode kernels share (included only by paged_decode_mma.cu and
// paged_decode_fp8.cu): the end of a CTA. Each of its 4 warps ran an online softmax over its own
// 16-key tiles for the 16 rows of an m16n8k16 tile (the query heads of one KV head), with the row
// maxima of the raw scores (m0: row lane / 4, m1: row lane / 4 + 8) and this lane's part of the
// rows' exp sums (l0, l1), and wrote its unnormalized 16 x HD fp32 output, row-major, to its own
// shared memory at warp_out + warp * warp_stride bytes. FinishMmaCta merges the warps with
// log-sum-exp weights (as flash-decoding merges splits) and writes bf16 `out` (one split) or the
// split result, after which the last CTA of a split group merges the splits (paged_decode_split.cuh),
// or, in a cluster launch, the cluster's CTAs merge them through distributed shared memory.
#pragma once

#include "kernels/cuda/mma_utils.cuh"
#include "kernels/cuda/paged_decode_split.cuh"

namespace tandem::cuda::detail {
namespace decode {

constexpr float kLog2e = 1.4426950408889634f;

// The cluster merge (DecodeKernel::kMma on sm_90 where 2 <= splits <= kPagedDecodeMaxClusterSplits:
// the splits of a (sequence, KV head) are one thread-block cluster along x, cluster rank = split).
// A CTA's split result sits in its own shared memory, `part`: [16][HD] normalized outputs (fp32,
// V scale applied), then at kClusterMaxOffset * HD the 16 row maxima of the scaled scores and the
// 16 exp sums (the units of MergeSplits). After a cluster barrier the CTA of rank r merges the r-th
// of `used` slices of the group x HD outputs, reading every split's values through distributed
// shared memory (log-sum-exp weights, as MergeSplits), and writes them as bf16: no workspace, no
// fence, no ticket, no second pass over L2.
constexpr int kClusterMaxOffset = 16;  // in rows of HD floats
template <int HD>
constexpr size_t ClusterPartBytes() {
  return sizeof(float) * (kClusterMaxOffset * HD + 32);
}

template <int HD>
__device__ void ClusterMergeSplits(const PagedDecodeArgs& a, int seq, int h0, int group, int used, int rank,
                                   const float* part) {
  constexpr int kVec = 4, kMax = kPagedDecodeMaxClusterSplits;
  const int total = group * (HD / kVec);
  const int per = (total + used - 1) / used;
  const int lo = rank * per, hi = min(lo + per, total);
  for (int i = lo + static_cast<int>(threadIdx.x); i < hi; i += kThreads) {
    const int g = i / (HD / kVec), d = (i % (HD / kVec)) * kVec;
    uint32_t base[kMax];
    float m[kMax], l[kMax];
#pragma unroll
    for (int r = 0; r < kMax; ++r) {
      if (r < used) {
        base[r] = ClusterMapShared(part, static_cast<unsigned>(r));
        m[r] = LdCluster(base[r] + sizeof(float) * (kClusterMaxOffset * HD + g));
        l[r] = LdCluster(base[r] + sizeof(float) * (kClusterMaxOffset * HD + 16 + g));
      }
    }
    float mx = -INFINITY;
#pragma unroll
    for (int r = 0; r < kMax; ++r) {
      if (r < used) mx = fmaxf(mx, m[r]);
    }
    float total_w = 0.0f;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int r = 0; r < kMax; ++r) {
      if (r < used) {
        const float w = m[r] == -INFINITY ? 0.0f : l[r] * expf(m[r] - mx);
        const float4 v = LdCluster4(base[r] + sizeof(float) * (g * HD + d));
        total_w += w;
        acc.x += w * v.x;
        acc.y += w * v.y;
        acc.z += w * v.z;
        acc.w += w * v.w;
      }
    }
    const float inv = 1.0f / total_w;
    __nv_bfloat16* o = a.out + seq * a.out_stride + static_cast<int64_t>(h0 + g) * HD + d;
    o[0] = __float2bfloat16_rn(acc.x * inv);
    o[1] = __float2bfloat16_rn(acc.y * inv);
    o[2] = __float2bfloat16_rn(acc.z * inv);
    o[3] = __float2bfloat16_rn(acc.w * inv);
  }
}

// Every thread of the CTA calls this. scale: the softmax scale (K's FP8 scale folded in);
// v_scale multiplies the output (1 for bf16 KV). merge_scratch: 2 * 16 * kPagedDecodeMaxSplits
// floats of shared memory no longer in use.
template <int HD>
__device__ void FinishMmaCta(const PagedDecodeArgs& a, const Workspace& ws, const unsigned char* warp_out,
                             size_t warp_stride, float (*s_m)[16], float (*s_l)[16], unsigned* s_ticket,
                             int seq, int split, int h0, int group, int used, float scale, float v_scale,
                             bool has_tiles, float m0, float m1, float l0, float l1, float* merge_scratch,
                             float* cluster_part = nullptr) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  l0 += __shfl_xor_sync(kFullMask, l0, 1);
  l0 += __shfl_xor_sync(kFullMask, l0, 2);
  l1 += __shfl_xor_sync(kFullMask, l1, 1);
  l1 += __shfl_xor_sync(kFullMask, l1, 2);
  if ((lane & 3) == 0) {
    const int r = lane >> 2;
    s_m[warp][r] = has_tiles ? m0 : -INFINITY;
    s_m[warp][r + 8] = has_tiles ? m1 : -INFINITY;
    s_l[warp][r] = l0;
    s_l[warp][r + 8] = l1;
  }
  __syncthreads();

  // Merge the warps (log-sum-exp weights on the raw-score maxima).
  const float sl2 = scale * kLog2e;
  for (int idx = tid; idx < group * HD; idx += kThreads) {
    const int g = idx / HD, d = idx % HD;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_m[w][g]);
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float wt = s_m[w][g] == -INFINITY ? 0.0f : Exp2((s_m[w][g] - mx) * sl2);
      sum += wt * s_l[w][g];
      acc += wt * reinterpret_cast<const float*>(warp_out + w * warp_stride)[g * HD + d];
    }
    acc = acc / sum * v_scale;
    const int h = h0 + g;
    if (cluster_part != nullptr && used > 1) {  // the cluster merge reads it from shared memory
      cluster_part[g * HD + d] = acc;
      if (d == 0) {
        cluster_part[kClusterMaxOffset * HD + g] = mx * scale;
        cluster_part[kClusterMaxOffset * HD + 16 + g] = sum;
      }
    } else if (used == 1) {
      a.out[seq * a.out_stride + static_cast<int64_t>(h) * HD + d] = __float2bfloat16_rn(acc);
    } else {
      // Split results in the SIMT kernel's units: the max of the scaled scores.
      const int64_t row = (static_cast<int64_t>(seq) * a.num_heads + h) * ws.splits + split;
      ws.partial_out[row * HD + d] = acc;
      if (d == 0) {
        ws.max_logits[row] = mx * scale;
        ws.exp_sums[row] = sum;
      }
    }
  }
  if (cluster_part != nullptr) {
    ClusterSync();  // every split result of the cluster is in its CTA's shared memory
    if (used > 1) ClusterMergeSplits<HD>(a, seq, h0, group, used, split, cluster_part);
    ClusterSync();  // no CTA leaves (its shared memory) while another may still read it
    return;
  }
  if (used == 1 || !ws.merge_in_kernel) return;
  if (!LastToFinish(ws, seq, used, s_ticket)) return;
  MergeSplits<HD, 16>(a, ws, seq, h0, group, used, merge_scratch);
}

}  // namespace decode
}  // namespace tandem::cuda::detail
