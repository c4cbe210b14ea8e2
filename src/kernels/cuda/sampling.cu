#include <algorithm>
#include <climits>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/sampling.h"

namespace tandem::cuda::detail {
namespace {

constexpr int kThreads = 1024;

__global__ void __launch_bounds__(kThreads) LogSoftmaxKernel(const float* x, int64_t ldx, int n,
                                                             float* out, int64_t ldo) {
  __shared__ float scratch[32];
  const float* row = x + blockIdx.x * ldx;
  float* dst = out + blockIdx.x * ldo;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, row[i]);
  m = BlockMax(m, scratch);
  float sum = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) sum += expf(row[i] - m);
  sum = BlockSum(sum, scratch);
  const float lse = m + logf(sum);
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = row[i] - lse;
}

__global__ void __launch_bounds__(kThreads) ArgmaxKernel(const float* x, int64_t ldx, int n,
                                                         int32_t* ids) {
  __shared__ float sv[32];
  __shared__ int si[32];
  const float* row = x + blockIdx.x * ldx;
  float v = -INFINITY;
  int idx = INT_MAX;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    if (Better(row[i], i, v, idx)) { v = row[i]; idx = i; }
  }
  BlockBest(v, idx, sv, si);
  if (threadIdx.x == 0) ids[blockIdx.x] = idx == INT_MAX ? 0 : idx;
}

// (max, sum of exp(x - max)) pairs merged; a max of -inf carries no mass.
__device__ inline void MergeLse(float& m, float& s, float om, float os) {
  const float nm = fmaxf(m, om);
  if (nm == -INFINITY) return;
  s = (m == -INFINITY ? 0.0f : s * expf(m - nm)) + (om == -INFINITY ? 0.0f : os * expf(om - nm));
  m = nm;
}

// (max, sum) merged over the warp; every lane gets it.
__device__ inline void WarpLse(float& m, float& s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(kFullMask, m, o);
    const float os = __shfl_xor_sync(kFullMask, s, o);
    MergeLse(m, s, om, os);
  }
}

constexpr int kLseThreads = 512;

// A row's (argmax, max, sum of exp(x - max)) over a range of its columns.
struct LsePart {
  float v;
  int idx;
  float m;
  float s;
};

static_assert(sizeof(LsePart) == kArgmaxLsePartBytes, "sampling.h sizes the workspace");

// grid (num_rows, chunks): block (r, c) scans columns [c * chunk, min(n, (c + 1) * chunk)) of
// row r; with one chunk it writes the row's results, else its partial into parts[r * chunks + c].
template <bool kPartial>
__global__ void __launch_bounds__(kLseThreads) ArgmaxLogSumExpKernel(const float* x, int64_t ldx,
                                                                     int n, int chunk, int32_t* ids,
                                                                     float* max_values, float* lse,
                                                                     LsePart* parts) {
  __shared__ float sv[32], sm[32], ss[32];
  __shared__ int si[32];
  const float* row = x + blockIdx.x * ldx;
  const int begin = blockIdx.y * chunk;
  const int end = min(n, begin + chunk);
  float v = -INFINITY, m = -INFINITY, s = 0.0f;
  int idx = INT_MAX;
  for (int i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float xi = row[i];
    if (Better(xi, i, v, idx)) { v = xi; idx = i; }
    if (xi > m) {
      s = (m == -INFINITY ? 0.0f : s * expf(m - xi)) + 1.0f;
      m = xi;
    } else if (xi != -INFINITY) {
      s += expf(xi - m);
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, num_warps = blockDim.x >> 5;
  WarpBest(v, idx);
  WarpLse(m, s);
  if (lane == 0) { sv[warp] = v; si[warp] = idx; sm[warp] = m; ss[warp] = s; }
  __syncthreads();
  if (warp != 0) return;
  v = lane < num_warps ? sv[lane] : -INFINITY;
  idx = lane < num_warps ? si[lane] : INT_MAX;
  m = lane < num_warps ? sm[lane] : -INFINITY;
  s = lane < num_warps ? ss[lane] : 0.0f;
  WarpBest(v, idx);
  WarpLse(m, s);
  if (lane != 0) return;
  if constexpr (kPartial) {
    parts[static_cast<int64_t>(blockIdx.x) * gridDim.y + blockIdx.y] = LsePart{v, idx, m, s};
  } else {
    ids[blockIdx.x] = idx == INT_MAX ? 0 : idx;
    max_values[blockIdx.x] = v;
    lse[blockIdx.x] = m + logf(s);
  }
}

// One warp per row: the row's `chunks` partials merged (argmax by Better, so ties still go to
// the lowest index; the sums rescaled to the common max).
__global__ void ArgmaxLogSumExpMergeKernel(const LsePart* parts, int chunks, int num_rows,
                                           int32_t* ids, float* max_values, float* lse) {
  const int lane = threadIdx.x & 31;
  const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= num_rows) return;  // warp-uniform
  float v = -INFINITY, m = -INFINITY, s = 0.0f;
  int idx = INT_MAX;
  for (int c = lane; c < chunks; c += 32) {
    const LsePart p = parts[static_cast<int64_t>(r) * chunks + c];
    if (Better(p.v, p.idx, v, idx)) { v = p.v; idx = p.idx; }
    MergeLse(m, s, p.m, p.s);
  }
  WarpBest(v, idx);
  WarpLse(m, s);
  if (lane == 0) {
    ids[r] = idx == INT_MAX ? 0 : idx;
    max_values[r] = v;
    lse[r] = m + logf(s);
  }
}

// Round r picks the best element strictly worse (in Better order) than round r-1's pick.
__global__ void __launch_bounds__(kThreads) TopKKernel(const float* x, int64_t ldx, int n, int k,
                                                       int32_t* ids, float* values) {
  __shared__ float sv[32];
  __shared__ int si[32];
  const float* row = x + blockIdx.x * ldx;
  float last_v = INFINITY;
  int last_i = -1;  // before round 0 every element is eligible
  for (int r = 0; r < k; ++r) {
    float v = -INFINITY;
    int idx = INT_MAX;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const float xi = row[i];
      const bool eligible = r == 0 || Better(last_v, last_i, xi, i);
      if (eligible && Better(xi, i, v, idx)) { v = xi; idx = i; }
    }
    BlockBest(v, idx, sv, si);
    if (threadIdx.x == 0) {
      ids[static_cast<int64_t>(blockIdx.x) * k + r] = idx == INT_MAX ? 0 : idx;
      values[static_cast<int64_t>(blockIdx.x) * k + r] = v;
    }
    last_v = v;
    last_i = idx;
  }
}

}  // namespace

cudaError_t LaunchLogSoftmax(const float* x, int64_t ldx, int num_rows, int n, float* out,
                             int64_t ldo, cudaStream_t stream) {
  if (num_rows == 0 || n == 0) return cudaSuccess;
  TANDEM_LAUNCH(LogSoftmaxKernel, num_rows, kThreads, 0, stream, x, ldx, n, out, ldo);
  return cudaGetLastError();
}

cudaError_t LaunchArgmax(const float* x, int64_t ldx, int num_rows, int n, int32_t* ids,
                         cudaStream_t stream) {
  if (num_rows == 0 || n == 0) return cudaSuccess;
  TANDEM_LAUNCH(ArgmaxKernel, num_rows, kThreads, 0, stream, x, ldx, n, ids);
  return cudaGetLastError();
}

int ArgmaxLogSumExpChunks(int num_rows, int n, int num_sms) {
  if (num_rows <= 0 || n <= 0) return 1;
  // About 4 blocks per SM in all, each chunk >= 2048 columns, at most kMaxArgmaxLseChunks.
  const int64_t target = 4 * static_cast<int64_t>(num_sms > 0 ? num_sms : 1);
  int64_t c = (target + num_rows - 1) / num_rows;
  c = std::min<int64_t>({c, n / 2048, kMaxArgmaxLseChunks});
  return static_cast<int>(std::max<int64_t>(c, 1));
}

cudaError_t LaunchArgmaxLogSumExp(const float* x, int64_t ldx, int num_rows, int n, int32_t* ids,
                                  float* max_values, float* lse, cudaStream_t stream, int chunks,
                                  void* workspace) {
  if (num_rows == 0 || n == 0) return cudaSuccess;
  if (chunks <= 1 || workspace == nullptr) {
    TANDEM_LAUNCH(ArgmaxLogSumExpKernel<false>, dim3(num_rows, 1), kLseThreads, 0, stream, x, ldx,
                  n, n, ids, max_values, lse, static_cast<LsePart*>(nullptr));
    return cudaGetLastError();
  }
  auto* parts = static_cast<LsePart*>(workspace);
  const int chunk = (n + chunks - 1) / chunks;
  TANDEM_LAUNCH(ArgmaxLogSumExpKernel<true>, dim3(num_rows, chunks), kLseThreads, 0, stream, x,
                ldx, n, chunk, ids, max_values, lse, parts);
  constexpr int kMergeWarps = 8;
  TANDEM_LAUNCH(ArgmaxLogSumExpMergeKernel, (num_rows + kMergeWarps - 1) / kMergeWarps,
                32 * kMergeWarps, 0, stream, parts, chunks, num_rows, ids, max_values, lse);
  return cudaGetLastError();
}

cudaError_t LaunchTopK(const float* x, int64_t ldx, int num_rows, int n, int k, int32_t* ids,
                       float* values, cudaStream_t stream) {
  if (num_rows == 0 || k == 0) return cudaSuccess;
  TANDEM_LAUNCH(TopKKernel, num_rows, kThreads, 0, stream, x, ldx, n, k, ids, values);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::detail
