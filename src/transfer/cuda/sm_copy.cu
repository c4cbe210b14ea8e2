#include "transfer/cuda/sm_copy.h"

#include <algorithm>

namespace tandem::transfer::cuda {

namespace {

constexpr int kMaxRanges = 256;   // per launch: 256 * 16 + 257 * 8 bytes of kernel parameters
constexpr int kFewRanges = 64;    // up to this many: a launch with a quarter of the parameters
constexpr int kThreads = 512;
constexpr int kUnroll = 4;        // 16-byte loads in flight per thread before the stores
constexpr uint64_t kChunk = 4096;  // 16-byte units a CTA takes at a time: 64 KiB, one KV block

template <int N>
struct Ranges {
  uint64_t src[N];  // each minus 16 * its start: unit u of the launch is at src[i] + 16 u
  uint64_t dst[N];  // (unsigned arithmetic: may wrap below the range)
  uint64_t start[N + 1];  // prefix sums of the lengths in 16-byte units
  int n;
};

// CTAs take chunks of kChunk units of the concatenated ranges in turn; a chunk may hold the end
// of one range and the start of the next ones.
template <int N>
__global__ void __launch_bounds__(kThreads) SmCopyKernel(const __grid_constant__ Ranges<N> r) {
  const uint64_t total = r.start[r.n];
  for (uint64_t c = static_cast<uint64_t>(blockIdx.x) * kChunk; c < total;
       c += static_cast<uint64_t>(gridDim.x) * kChunk) {
    int i = 0, hi = r.n - 1;  // the range holding unit c: start[i] <= c < start[i + 1]
    while (i < hi) {
      const int mid = (i + hi + 1) / 2;
      if (r.start[mid] <= c) {
        i = mid;
      } else {
        hi = mid - 1;
      }
    }
    const uint64_t chunk_end = min(c + kChunk, total);
    for (uint64_t pos = c; pos < chunk_end; ++i) {
      const uint64_t end = min(chunk_end, r.start[i + 1]);
      const int4* __restrict__ s = reinterpret_cast<const int4*>(r.src[i]);
      int4* __restrict__ d = reinterpret_cast<int4*>(r.dst[i]);
      uint64_t u = pos + threadIdx.x;
      for (; u + (kUnroll - 1) * kThreads < end; u += kUnroll * kThreads) {
        int4 v[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) v[k] = __ldg(s + u + k * kThreads);
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) d[u + k * kThreads] = v[k];
      }
      for (; u < end; u += kThreads) d[u] = __ldg(s + u);
      pos = end;
    }
  }
}

// One launch for ranges [first, last) (at most N of them).
template <int N>
cudaError_t LaunchOne(const SmCopyRange* ranges, int first, int last, int ctas, cudaStream_t stream) {
  Ranges<N> r{};
  r.n = 0;
  for (int i = first; i < last; ++i) {
    if (ranges[i].len == 0) continue;
    const uint64_t units = ranges[i].len / 16;
    r.src[r.n] = ranges[i].src - 16 * r.start[r.n];
    r.dst[r.n] = ranges[i].dst - 16 * r.start[r.n];
    r.start[r.n + 1] = r.start[r.n] + units;
    ++r.n;
  }
  if (r.n == 0) return cudaSuccess;
  const uint64_t chunks = (r.start[r.n] + kChunk - 1) / kChunk;
  const int grid = static_cast<int>(std::min<uint64_t>(ctas, chunks));
  SmCopyKernel<N><<<grid, kThreads, 0, stream>>>(r);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchSmCopy(const SmCopyRange* ranges, int n, int ctas, cudaStream_t stream) {
  if (ctas < 1 || n < 0) return cudaErrorInvalidValue;
  for (int i = 0; i < n; ++i) {
    if (!SmCopyAligned(ranges[i])) return cudaErrorInvalidValue;
  }
  for (int first = 0; first < n; first += kMaxRanges) {
    const int last = std::min(n, first + kMaxRanges);
    const cudaError_t e = last - first <= kFewRanges ? LaunchOne<kFewRanges>(ranges, first, last, ctas, stream)
                                                     : LaunchOne<kMaxRanges>(ranges, first, last, ctas, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace tandem::transfer::cuda
