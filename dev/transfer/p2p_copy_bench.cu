// Experiment (issue 7): ways to move the KV of an 1800-token Qwen3-8B prompt (36 layer pools, 113
// blocks of 64 KiB each = 36 regions of 7.4 MB, 266.6 MB) from cuda:0 to cuda:1, against one
// cudaMemcpyPeerAsync of the same bytes. Not part of the build: nvcc -O3 -std=c++17
// -gencode=arch=compute_90,code=sm_90 -o p2p_copy_bench p2p_copy_bench.cu -lcuda
//
// Variants: copy engine (CE) with one cudaMemcpyAsync per region on 1 or 2 streams, one
// cudaMemcpyBatchAsync per stream, one cudaMemcpy2DAsync over a single allocation (rows = layers);
// an SM copy kernel (16-byte loads and stores, one launch for all regions) run on the source GPU
// (push: stores over NVLink) or on the destination GPU (pull: loads over NVLink), several grids.
// Times: cudaEvent on the stream (device time) and wall time enqueue -> synchronize, median of 30.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

constexpr int kLayers = 36;
constexpr size_t kBlock = 64 << 10;
constexpr int kBlocks = 113;
constexpr int kPoolBlocks = 1024;  // a layer pool much larger than the transfer, as in a worker
constexpr size_t kRegion = kBlocks * kBlock;
constexpr size_t kTotal = kLayers * kRegion;

struct Regions {
  const char* src[kLayers];
  char* dst[kLayers];
  unsigned long long len[kLayers];
  unsigned long long start[kLayers + 1];  // prefix sums of len in 16-byte units
  int n;
};

// Each CTA takes chunks of `chunk` 16-byte units round-robin; a chunk lies within one region
// (regions are multiples of the chunk here; the last chunk of a region is cut at its end).
template <int UNROLL>
__global__ void __launch_bounds__(512) CopyKernel(const __grid_constant__ Regions r, unsigned long long chunk) {
  const unsigned long long total = r.start[r.n];
  for (unsigned long long c = blockIdx.x * chunk; c < total; c += gridDim.x * chunk) {
    int i = 0;
    while (r.start[i + 1] <= c) ++i;
    const unsigned long long end = min(c + chunk, r.start[i + 1]);
    const int4* s = reinterpret_cast<const int4*>(r.src[i]) - r.start[i];
    int4* d = reinterpret_cast<int4*>(r.dst[i]) - r.start[i];
    unsigned long long u = c + threadIdx.x;
    for (; u + (UNROLL - 1) * blockDim.x < end; u += UNROLL * blockDim.x) {
      int4 v[UNROLL];
#pragma unroll
      for (int k = 0; k < UNROLL; ++k) v[k] = __ldg(s + u + k * blockDim.x);
#pragma unroll
      for (int k = 0; k < UNROLL; ++k) d[u + k * blockDim.x] = v[k];
    }
    for (; u < end; u += blockDim.x) d[u] = __ldg(s + u);
  }
}

struct Timing {
  double dev_ms, wall_ms;
};

Timing Measure(cudaStream_t s, const std::function<void()>& enqueue, int reps = 30) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  enqueue();
  CK(cudaStreamSynchronize(s));
  std::vector<double> dev, wall;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    CK(cudaEventRecord(a, s));
    enqueue();
    CK(cudaEventRecord(b, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaDeviceSynchronize());
    auto t1 = std::chrono::steady_clock::now();
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    dev.push_back(ms);
    wall.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(dev.begin(), dev.end());
  std::sort(wall.begin(), wall.end());
  return {dev[reps / 2], wall[reps / 2]};
}

double g_raw_gbps = 0;
void Row(const std::string& name, size_t bytes, Timing t) {
  const double gbps = bytes / (t.wall_ms * 1e-3) / 1e9;
  std::printf("%-44s %8.3f %8.3f %8.1f %6.1f%%\n", name.c_str(), t.dev_ms, t.wall_ms, gbps,
              g_raw_gbps > 0 ? 100.0 * gbps / g_raw_gbps : 100.0);
  std::fflush(stdout);
  if (g_raw_gbps == 0) g_raw_gbps = gbps;
}

int main(int argc, char** argv) {
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  const int src_dev = 0, dst_dev = n > 1 ? 1 : 0;
  std::printf("devices %d, cuda:%d -> cuda:%d, %d regions of %zu B = %zu B\n", n, src_dev, dst_dev, kLayers,
              kRegion, kTotal);
  if (dst_dev != src_dev) {
    CK(cudaSetDevice(src_dev));
    CK(cudaDeviceEnablePeerAccess(dst_dev, 0));
    CK(cudaSetDevice(dst_dev));
    CK(cudaDeviceEnablePeerAccess(src_dev, 0));
  }
  // Per-layer pools on each side; plus one allocation per side holding all layers (for 2D).
  std::vector<char*> sp(kLayers), dp(kLayers);
  char *s_one = nullptr, *d_one = nullptr;
  const size_t pool = kPoolBlocks * kBlock;
  CK(cudaSetDevice(src_dev));
  for (auto& p : sp) CK(cudaMalloc(&p, pool));
  CK(cudaMalloc(&s_one, kLayers * pool));
  for (auto& p : sp) CK(cudaMemset(p, 1, pool));
  CK(cudaMemset(s_one, 2, kLayers * pool));
  CK(cudaSetDevice(dst_dev));
  for (auto& p : dp) CK(cudaMalloc(&p, pool));
  CK(cudaMalloc(&d_one, kLayers * pool));
  CK(cudaSetDevice(src_dev));
  cudaStream_t s0, s1, sd;
  CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaSetDevice(dst_dev));
  CK(cudaStreamCreateWithFlags(&sd, cudaStreamNonBlocking));
  CK(cudaSetDevice(src_dev));
  const size_t src_off = 100 * kBlock, dst_off = 700 * kBlock;  // different block ids on each side

  std::printf("%-44s %8s %8s %8s %7s\n", "variant", "dev ms", "wall ms", "GB/s", "of raw");
  Row("raw: 1 cudaMemcpyPeerAsync 266.6 MB", kTotal, Measure(s0, [&] {
        CK(cudaMemcpyPeerAsync(d_one, dst_dev, s_one, src_dev, kTotal, s0));
      }));
  Row("raw: 1 cudaMemcpyAsync(Default) 266.6 MB", kTotal, Measure(s0, [&] {
        CK(cudaMemcpyAsync(d_one, s_one, kTotal, cudaMemcpyDefault, s0));
      }));
  Row("CE: 36 cudaMemcpyAsync, 1 stream", kTotal, Measure(s0, [&] {
        for (int l = 0; l < kLayers; ++l) CK(cudaMemcpyAsync(dp[l] + dst_off, sp[l] + src_off, kRegion, cudaMemcpyDefault, s0));
      }));
  std::vector<void*> dsts(kLayers);
  std::vector<const void*> srcs(kLayers);
  std::vector<size_t> sizes(kLayers, kRegion);
  for (int l = 0; l < kLayers; ++l) {
    dsts[l] = dp[l] + dst_off;
    srcs[l] = sp[l] + src_off;
  }
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t ai = 0;
  Row("CE: 1 cudaMemcpyBatchAsync x36, 1 stream", kTotal, Measure(s0, [&] {
        CK(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), kLayers, &attr, &ai, 1, s0));
      }));
  cudaEvent_t fork, join;
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  for (int k : {2, 4}) {
    std::vector<cudaStream_t> extra(k);
    extra[0] = s0;
    for (int i = 1; i < k; ++i) CK(cudaStreamCreateWithFlags(&extra[i], cudaStreamNonBlocking));
    Row("CE: batch x36 over " + std::to_string(k) + " streams", kTotal, Measure(s0, [&] {
          CK(cudaEventRecord(fork, s0));
          for (int i = 1; i < k; ++i) CK(cudaStreamWaitEvent(extra[i], fork));
          const int per = kLayers / k;
          for (int i = 0; i < k; ++i) {
            CK(cudaMemcpyBatchAsync(dsts.data() + i * per, srcs.data() + i * per, sizes.data() + i * per, per, &attr,
                                    &ai, 1, extra[i]));
          }
          for (int i = 1; i < k; ++i) {
            CK(cudaEventRecord(join, extra[i]));
            CK(cudaStreamWaitEvent(s0, join));
          }
        }));
    Row("CE: plain x36 over " + std::to_string(k) + " streams", kTotal, Measure(s0, [&] {
          CK(cudaEventRecord(fork, s0));
          for (int i = 1; i < k; ++i) CK(cudaStreamWaitEvent(extra[i], fork));
          for (int l = 0; l < kLayers; ++l) {
            CK(cudaMemcpyAsync(dsts[l], srcs[l], kRegion, cudaMemcpyDefault, extra[l % k]));
          }
          for (int i = 1; i < k; ++i) {
            CK(cudaEventRecord(join, extra[i]));
            CK(cudaStreamWaitEvent(s0, join));
          }
        }));
  }
  Row("CE: 1 cudaMemcpy2DAsync, 36 rows (1 alloc)", kTotal, Measure(s0, [&] {
        CK(cudaMemcpy2DAsync(d_one + dst_off, pool, s_one + src_off, pool, kRegion, kLayers, cudaMemcpyDefault, s0));
      }));
  // Pieces: the regions cut into pieces of 1 MB / 256 KB (more, smaller CE commands).
  for (size_t piece : {size_t{4} << 20, size_t{1} << 20}) {
    std::vector<void*> d2;
    std::vector<const void*> s2;
    std::vector<size_t> z2;
    for (int l = 0; l < kLayers; ++l) {
      for (size_t o = 0; o < kRegion; o += piece) {
        d2.push_back(dp[l] + dst_off + o);
        s2.push_back(sp[l] + src_off + o);
        z2.push_back(std::min(piece, kRegion - o));
      }
    }
    Row("CE: batch of " + std::to_string(d2.size()) + " pieces, 1 stream", kTotal, Measure(s0, [&] {
          CK(cudaMemcpyBatchAsync(d2.data(), s2.data(), z2.data(), d2.size(), &attr, &ai, 1, s0));
        }));
  }
  Regions r{};
  r.n = kLayers;
  for (int l = 0; l < kLayers; ++l) {
    r.src[l] = sp[l] + src_off;
    r.dst[l] = dp[l] + dst_off;
    r.len[l] = kRegion;
    r.start[l + 1] = r.start[l] + kRegion / 16;
  }
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, src_dev));
  for (int grid : {8, 16, 32, 66, 132, 264, 528}) {
    for (unsigned long long chunk_kb : {64ull, 256ull}) {
      if (chunk_kb == 256 && grid != 132 && grid != 264) continue;
      const unsigned long long chunk = chunk_kb * 1024 / 16;
      Row("SM push: grid " + std::to_string(grid) + "x512, chunk " + std::to_string(chunk_kb) + " KB, unroll 4",
          kTotal, Measure(s0, [&] { CopyKernel<4><<<grid, 512, 0, s0>>>(r, chunk); CK(cudaGetLastError()); }));
    }
  }
  Row("SM push: grid " + std::to_string(sms * 2) + "x512, chunk 64 KB, unroll 8", kTotal, Measure(s0, [&] {
        CopyKernel<8><<<sms * 2, 512, 0, s0>>>(r, 4096);
        CK(cudaGetLastError());
      }));
  CK(cudaSetDevice(dst_dev));
  for (int grid : {32, 132, 264}) {
    Row("SM pull (kernel on dst): grid " + std::to_string(grid) + "x512, chunk 64 KB", kTotal,
        Measure(sd, [&] { CopyKernel<4><<<grid, 512, 0, sd>>>(r, 4096); CK(cudaGetLastError()); }));
  }
  // CE and SM at once: half the regions each.
  CK(cudaSetDevice(src_dev));
  Regions half = r;
  half.n = kLayers / 2;
  Row("CE batch 18 + SM push 18 (2 streams)", kTotal, Measure(s0, [&] {
        CK(cudaEventRecord(fork, s0));
        CK(cudaStreamWaitEvent(s1, fork));
        CK(cudaMemcpyBatchAsync(dsts.data() + 18, srcs.data() + 18, sizes.data() + 18, 18, &attr, &ai, 1, s1));
        CopyKernel<4><<<sms, 512, 0, s0>>>(half, 4096);
        CK(cudaEventRecord(join, s1));
        CK(cudaStreamWaitEvent(s0, join));
      }));
  // One block per layer (a 1-16 token prompt): 36 x 64 KiB.
  {
    std::vector<size_t> small(kLayers, kBlock);
    const size_t bytes = kLayers * kBlock;
    Row("small: CE batch 36 x 64 KiB", bytes, Measure(s0, [&] {
          CK(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), small.data(), kLayers, &attr, &ai, 1, s0));
        }));
    Regions rs = r;
    for (int l = 0; l < kLayers; ++l) {
      rs.len[l] = kBlock;
      rs.start[l + 1] = rs.start[l] + kBlock / 16;
    }
    for (int grid : {32, 132}) {
      Row("small: SM push 36 x 64 KiB, grid " + std::to_string(grid), bytes,
          Measure(s0, [&] { CopyKernel<4><<<grid, 512, 0, s0>>>(rs, 1024); CK(cudaGetLastError()); }));
    }
  }
  // Check the SM kernel's bytes.
  CK(cudaMemset(dp[5], 0, pool));
  CopyKernel<4><<<sms, 512, 0, s0>>>(r, 4096);
  CK(cudaStreamSynchronize(s0));
  std::vector<char> host(kRegion);
  CK(cudaMemcpy(host.data(), dp[5] + dst_off, kRegion, cudaMemcpyDefault));
  size_t bad = std::count_if(host.begin(), host.end(), [](char c) { return c != 1; });
  std::printf("check: %zu wrong bytes in layer 5 after the SM push\n", bad);
  (void)argc;
  (void)argv;
  return 0;
}
