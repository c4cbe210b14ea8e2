// Kernels of sampling_filter.h (the algorithm and its rules are described there).
#include <cfloat>
#include <climits>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/sampling_filter.h"

namespace tandem::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBuckets = 1024;            // of x = -log p, width 1/32, the last one open
constexpr double kBucketsPerUnit = 32.0;
constexpr int kBucketsPerThread = kBuckets / kThreads;
constexpr int kCap = kSampleMaxCandidates;
constexpr int kPenaltyThreads = 256;

// fp32 arithmetic rounded per operation (no FMA contraction), as the host computes it.
__device__ inline float MulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
__device__ inline float AddRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
__device__ inline float SubRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
__device__ inline float DivRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// Shared-memory atomics (the CPU emulator runs one fiber at a time, never inside a statement).
__device__ inline unsigned SharedFetchAdd(unsigned* p, unsigned v) {
#ifdef TANDEM_CUDA_EMU
  const unsigned old = *p;
  *p = old + v;
  return old;
#else
  return atomicAdd(p, v);
#endif
}
__device__ inline void SharedAdd(double* p, double v) {
#ifdef TANDEM_CUDA_EMU
  *p += v;
#else
  atomicAdd(p, v);
#endif
}

__global__ void __launch_bounds__(kPenaltyThreads)
    ApplyPenaltiesSavingKernel(float* logits, int64_t ld, const SampleRowSpec* specs,
                               const PenaltyRowEntry* entries, int num_entries, float* saved) {
  const int e = blockIdx.x * kPenaltyThreads + threadIdx.x;
  if (e >= num_entries) return;
  const PenaltyRowEntry pe = entries[e];
  const SampleRowSpec s = specs[pe.row];
  float* l = logits + pe.row * ld + pe.token_id;
  float v = *l;
  saved[e] = v;
  if (s.repetition_penalty != 1.0f) {
    v = v > 0 ? DivRn(v, s.repetition_penalty) : MulRn(v, s.repetition_penalty);
  }
  if ((s.frequency_penalty != 0.0f || s.presence_penalty != 0.0f) && pe.output_count > 0) {
    v = SubRn(v, AddRn(MulRn(static_cast<float>(pe.output_count), s.frequency_penalty),
                       s.presence_penalty));
  }
  *l = v;
}

__global__ void __launch_bounds__(kPenaltyThreads)
    RestorePenaltiesKernel(float* logits, int64_t ld, const PenaltyRowEntry* entries,
                           int num_entries, const float* saved) {
  const int e = blockIdx.x * kPenaltyThreads + threadIdx.x;
  if (e >= num_entries) return;
  logits[entries[e].row * ld + entries[e].token_id] = saved[e];
}

__global__ void __launch_bounds__(kPenaltyThreads)
    ChosenLogitsKernel(const float* logits, int64_t ld, int num_rows, const int32_t* token_ids,
                       float* out) {
  const int r = blockIdx.x * kPenaltyThreads + threadIdx.x;
  if (r < num_rows) out[r] = logits[r * ld + token_ids[r]];
}

// log p of a logit: double(float(l - max)) / T, exactly the host's expression.
__device__ inline double LogP(float l, float m, double inv_t) {
  return static_cast<double>(SubRn(l, m)) * inv_t;
}
__device__ inline bool IsCandidate(double p, double min_p) { return p > 0.0 && !(p < min_p); }
__device__ inline int BucketOf(double log_p) {
  const double x = -log_p;  // >= 0
  return x >= kBuckets / kBucketsPerUnit ? kBuckets - 1 : static_cast<int>(x * kBucketsPerUnit);
}

// Exclusive prefix sum over the warp by a butterfly (xor shuffles only; deterministic): returns
// the sum of the lower lanes' v, *total the warp's sum (the same on every lane).
__device__ inline double WarpExclusiveScan(double v, double* total) {
  const int lane = threadIdx.x & 31;
  double sum = v, pre = 0.0;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double t = __shfl_xor_sync(kFullMask, sum, o);
    if (lane & o) pre += t;
    sum += t;  // a + b == b + a: every lane of the group holds the same sum
  }
  *total = sum;
  return pre;
}

// The same over the block (kThreads); scratch: kWarps doubles; synchronizes twice.
__device__ inline double BlockExclusiveScan(double v, double* scratch, double* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double warp_total;
  const double pre = WarpExclusiveScan(v, &warp_total);
  if (lane == 0) scratch[warp] = warp_total;
  __syncthreads();
  double offset = 0.0, sum = 0.0;
  for (int w = 0; w < kWarps; ++w) {
    if (w == warp) offset = sum;
    sum += scratch[w];
  }
  __syncthreads();
  *total = sum;
  return offset + pre;
}

__device__ inline int WarpMinInt(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
__device__ inline int WarpMaxInt(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
// scratch: kWarps ints; synchronizes twice.
__device__ inline int BlockMinInt(int v, int* scratch) {
  v = WarpMinInt(v);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  int r = INT_MAX;
  for (int w = 0; w < kWarps; ++w) r = min(r, scratch[w]);
  __syncthreads();
  return r;
}
__device__ inline int BlockMaxInt(int v, int* scratch) {
  v = WarpMaxInt(v);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  int r = INT_MIN;
  for (int w = 0; w < kWarps; ++w) r = max(r, scratch[w]);
  __syncthreads();
  return r;
}

struct SampleShared {
  unsigned count[kBuckets];  // candidates per bucket
  double mass[kBuckets];     // their p summed (atomics: only used to bound, with a bucket of margin)
  float cand_v[kCap];        // compacted candidates: logit
  int cand_i[kCap];          //                       id
  double scan[kWarps];
  int ints[kWarps];
  float best_v[32];
  int best_i[32];
  unsigned num_cand;
  double base;               // the draw's chunk: the mass before it
};

// (logit desc, id asc) = (p desc, id asc) when ascending; by id ascending when by_id.
__device__ inline bool Before(float va, int ia, float vb, int ib, bool by_id) {
  return by_id ? ia < ib : Better(va, ia, vb, ib);
}

// Bitonic sort of cand_[0, size) (size a power of two) in Before order.
__device__ void BitonicSort(SampleShared& sh, int size, bool by_id) {
  for (int k = 2; k <= size; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int t = threadIdx.x; t < size; t += kThreads) {
        const int o = t ^ j;
        if (o <= t) continue;
        const bool up = (t & k) == 0;
        const float vt = sh.cand_v[t], vo = sh.cand_v[o];
        const int it = sh.cand_i[t], io = sh.cand_i[o];
        const bool swap = up ? Before(vo, io, vt, it, by_id) : Before(vt, it, vo, io, by_id);
        if (swap) {
          sh.cand_v[t] = vo; sh.cand_v[o] = vt;
          sh.cand_i[t] = io; sh.cand_i[o] = it;
        }
      }
      __syncthreads();
    }
  }
}

__device__ inline int PowerOfTwoAtLeast(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Over the list cand_[0, n): *total = sum of p; returns the first j whose cumulative sum is
// >= target (strict: > target), or -1. Each thread owns a run of consecutive positions.
__device__ int ListFirstCrossing(SampleShared& sh, int n, float m, double inv_t, double target,
                                 bool strict, double* total) {
  const int per = (n + kThreads - 1) / kThreads;
  const int begin = min(n, static_cast<int>(threadIdx.x) * per), end = min(n, begin + per);
  double local = 0.0;
  for (int j = begin; j < end; ++j) local += exp(LogP(sh.cand_v[j], m, inv_t));
  double cum = BlockExclusiveScan(local, sh.scan, total);
  int found = INT_MAX;
  for (int j = begin; j < end; ++j) {
    cum += exp(LogP(sh.cand_v[j], m, inv_t));
    if (strict ? cum > target : cum >= target) {
      found = j;
      break;
    }
  }
  found = BlockMinInt(found, sh.ints);
  return found == INT_MAX ? -1 : found;
}

__global__ void __launch_bounds__(kThreads)
    SampleRowsKernel(const float* logits, int64_t ld, int vocab, const SampleRowSpec* specs,
                     int32_t* token_ids, int32_t* status) {
  __shared__ SampleShared sh;
  const int row = blockIdx.x;
  const float* x = logits + row * ld;
  const SampleRowSpec spec = specs[row];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // Pass 1: the max (and the greedy pick: lowest id on ties).
  float best = -INFINITY;
  int best_id = INT_MAX;
  for (int i = tid; i < vocab; i += kThreads) {
    if (Better(x[i], i, best, best_id)) { best = x[i]; best_id = i; }
  }
  BlockBest(best, best_id, sh.best_v, sh.best_i);
  const int argmax = best_id == INT_MAX ? 0 : best_id;
  if (spec.temperature <= 0.0f) {
    if (tid == 0) { token_ids[row] = argmax; status[row] = kSamplePicked; }
    return;
  }
  const float m = best;
  const double inv_t = 1.0 / spec.temperature;
  const double min_p = spec.min_p;  // 0 when off: p > 0 already implies !(p < 0)

  // Pass 2: candidates per contiguous chunk of ids (the draw order of the plain case).
  for (int b = tid; b < kBuckets; b += kThreads) { sh.count[b] = 0; sh.mass[b] = 0.0; }
  if (tid == 0) sh.num_cand = 0;
  __syncthreads();
  const int chunk = (vocab + kThreads - 1) / kThreads;
  const int begin = min(vocab, tid * chunk), end = min(vocab, begin + chunk);
  // Histograms only where a bound is needed; the open last bucket (most of a real vocab) is not
  // counted by atomics but derived from the totals below.
  const bool want_count = spec.top_k > 0 || spec.top_p < 1.0f;
  const bool want_mass = spec.top_k <= 0 && spec.top_p < 1.0f;
  double chunk_mass = 0.0;
  int chunk_count = 0;
  for (int i = begin; i < end; ++i) {
    const double lp = LogP(x[i], m, inv_t);
    const double p = exp(lp);
    if (!IsCandidate(p, min_p)) continue;
    chunk_mass += p;
    ++chunk_count;
    const int b = BucketOf(lp);
    if (b == kBuckets - 1) continue;
    if (want_count) SharedFetchAdd(&sh.count[b], 1u);
    if (want_mass) SharedAdd(&sh.mass[b], p);
  }
  double total_all, num_cand_d;
  const double chunk_base = BlockExclusiveScan(chunk_mass, sh.scan, &total_all);
  BlockExclusiveScan(static_cast<double>(chunk_count), sh.scan, &num_cand_d);
  const int num_cand = static_cast<int>(num_cand_d);
  if (num_cand == 0) {  // min_p > 1: nothing survives (the host has no pick either)
    if (tid == 0) { token_ids[row] = argmax; status[row] = kSampleNeedsHost; }
    return;
  }
  const bool top_k = spec.top_k > 0 && spec.top_k < num_cand;
  const bool top_p = spec.top_p < 1.0f;

  if (!top_k && !top_p) {
    // Draw in id order: the chunk where u * total falls, then one warp walks it.
    const double target = spec.u * total_all;
    int t_hit = BlockMinInt(chunk_base + chunk_mass > target && chunk_count > 0 ? tid : INT_MAX,
                            sh.ints);
    double walk_target = target;
    if (t_hit == INT_MAX) {  // rounding past the end: the last candidate
      t_hit = BlockMaxInt(chunk_count > 0 ? tid : -1, sh.ints);
      walk_target = INFINITY;
    }
    if (tid == t_hit) sh.base = chunk_base;
    __syncthreads();
    if (warp != 0) return;
    const int wb = min(vocab, t_hit * chunk), we = min(vocab, wb + chunk);
    double base = sh.base;
    int found = INT_MAX, last = -1;
    for (int i0 = wb; i0 < we; i0 += 32) {
      const int i = i0 + lane;
      double w = 0.0;
      bool cand = false;
      if (i < we) {
        const double p = exp(LogP(x[i], m, inv_t));
        cand = IsCandidate(p, min_p);
        if (cand) w = p;
      }
      double step_total;
      const double pre = WarpExclusiveScan(w, &step_total);
      found = WarpMinInt(cand && base + (pre + w) > walk_target ? i : INT_MAX);
      last = max(last, WarpMaxInt(cand ? i : -1));
      if (found != INT_MAX) break;
      base += step_total;
    }
    if (lane == 0) {
      token_ids[row] = found != INT_MAX ? found : last;
      status[row] = kSamplePicked;
    }
    return;
  }

  // Bound the survivors by buckets: the k-th candidate's bucket (top-k), or one past the bucket
  // where the mass reaches top_p * total (top-p alone).
  double local_count = 0.0, local_mass = 0.0;
  for (int b = tid * kBucketsPerThread; b < (tid + 1) * kBucketsPerThread; ++b) {
    local_count += sh.count[b];
    local_mass += sh.mass[b];
  }
  double counted, massed;
  const double count_before = BlockExclusiveScan(local_count, sh.scan, &counted);
  const double mass_before = BlockExclusiveScan(local_mass, sh.scan, &massed);
  if (tid == kThreads - 1) {  // the owner of the last bucket: what the atomics skipped
    sh.count[kBuckets - 1] = static_cast<unsigned>(num_cand - static_cast<int>(counted));
    sh.mass[kBuckets - 1] = want_mass ? fmax(0.0, total_all - massed) : 0.0;
  }
  int bound = INT_MAX;
  {
    const double target_p = static_cast<double>(spec.top_p) * total_all;
    double c = count_before, s = mass_before;
    for (int b = tid * kBucketsPerThread; b < (tid + 1) * kBucketsPerThread; ++b) {
      c += sh.count[b];
      s += sh.mass[b];
      // Without the mass histogram (top_k > 0 but not below the candidates) no bound: all.
      if (top_k ? c >= spec.top_k : want_mass && s >= target_p) {
        bound = b;
        break;
      }
    }
  }
  bound = BlockMinInt(bound, sh.ints);
  if (bound == INT_MAX) bound = kBuckets - 1;
  if (!top_k) bound = min(bound + 1, kBuckets - 1);  // margin for the atomics' rounding
  double in_bound = 0.0;
  for (int b = tid * kBucketsPerThread; b < (tid + 1) * kBucketsPerThread && b <= bound; ++b) {
    in_bound += sh.count[b];
  }
  double num_bounded;
  BlockExclusiveScan(in_bound, sh.scan, &num_bounded);
  if (num_bounded > kCap) {
    if (tid == 0) { token_ids[row] = argmax; status[row] = kSampleNeedsHost; }
    return;
  }

  // Pass 3: compact the bounded candidates, sort them by (logit desc, id asc).
  for (int i = begin; i < end; ++i) {
    const double lp = LogP(x[i], m, inv_t);
    if (BucketOf(lp) > bound || !IsCandidate(exp(lp), min_p)) continue;
    const unsigned pos = SharedFetchAdd(&sh.num_cand, 1u);
    sh.cand_v[pos] = x[i];
    sh.cand_i[pos] = i;
  }
  __syncthreads();
  const int n_c = static_cast<int>(sh.num_cand);
  const int size = PowerOfTwoAtLeast(n_c);
  for (int j = n_c + tid; j < size; j += kThreads) { sh.cand_v[j] = -INFINITY; sh.cand_i[j] = INT_MAX; }
  __syncthreads();
  BitonicSort(sh, size, /*by_id=*/false);

  // top-k, top-p and the draw on the sorted list, as the host.
  const int n1 = top_k ? spec.top_k : n_c;
  int n = n1;
  if (top_p) {
    double total1 = total_all;
    if (top_k) ListFirstCrossing(sh, n1, m, inv_t, INFINITY, true, &total1);
    double unused;
    const int j = ListFirstCrossing(sh, n1, m, inv_t, static_cast<double>(spec.top_p) * total1,
                                    /*strict=*/false, &unused);
    n = j >= 0 ? j + 1 : n1;
  } else {
    // The host draws top-k survivors in id order.
    const int size_n = PowerOfTwoAtLeast(n);
    for (int j = n + tid; j < size_n; j += kThreads) { sh.cand_v[j] = -INFINITY; sh.cand_i[j] = INT_MAX; }
    __syncthreads();
    BitonicSort(sh, size_n, /*by_id=*/true);
  }
  double total2;
  ListFirstCrossing(sh, n, m, inv_t, INFINITY, true, &total2);
  const int j = ListFirstCrossing(sh, n, m, inv_t, spec.u * total2, /*strict=*/true, &total2);
  if (tid == 0) {
    token_ids[row] = sh.cand_i[j >= 0 ? j : n - 1];
    status[row] = kSamplePicked;
  }
}

}  // namespace

cudaError_t LaunchApplyPenaltiesSaving(float* logits, int64_t ld, const SampleRowSpec* specs,
                                       const PenaltyRowEntry* entries, int num_entries,
                                       float* saved, cudaStream_t stream) {
  if (num_entries == 0) return cudaSuccess;
  const int grid = (num_entries + kPenaltyThreads - 1) / kPenaltyThreads;
  TANDEM_LAUNCH(ApplyPenaltiesSavingKernel, grid, kPenaltyThreads, 0, stream, logits, ld, specs,
                entries, num_entries, saved);
  return cudaGetLastError();
}

cudaError_t LaunchRestorePenalties(float* logits, int64_t ld, const PenaltyRowEntry* entries,
                                   int num_entries, const float* saved, cudaStream_t stream) {
  if (num_entries == 0) return cudaSuccess;
  const int grid = (num_entries + kPenaltyThreads - 1) / kPenaltyThreads;
  TANDEM_LAUNCH(RestorePenaltiesKernel, grid, kPenaltyThreads, 0, stream, logits, ld, entries,
                num_entries, saved);
  return cudaGetLastError();
}

cudaError_t LaunchSampleRows(const float* logits, int64_t ld, int num_rows, int vocab,
                             const SampleRowSpec* specs, int32_t* token_ids, int32_t* status,
                             cudaStream_t stream) {
  if (num_rows == 0) return cudaSuccess;
  TANDEM_LAUNCH(SampleRowsKernel, num_rows, kThreads, 0, stream, logits, ld, vocab, specs,
                token_ids, status);
  return cudaGetLastError();
}

cudaError_t LaunchChosenLogits(const float* logits, int64_t ld, int num_rows,
                               const int32_t* token_ids, float* out, cudaStream_t stream) {
  if (num_rows == 0) return cudaSuccess;
  const int grid = (num_rows + kPenaltyThreads - 1) / kPenaltyThreads;
  TANDEM_LAUNCH(ChosenLogitsKernel, grid, kPenaltyThreads, 0, stream, logits, ld, num_rows,
                token_ids, out);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::detail
