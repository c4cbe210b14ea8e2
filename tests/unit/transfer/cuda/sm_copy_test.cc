// LaunchSmCopy (transfer/cuda/sm_copy.h) on real GPU memory: ranges of many sizes (16 B to 3 MB,
// ends that cut a 64 KiB chunk, empty ones), more than one launch's worth, within one GPU and to
// the second GPU where there is one; every byte checked against cudaMemcpy of the same ranges,
// and the bytes between the ranges untouched. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "transfer/cuda/cuda_copier.h"
#include "transfer/cuda/sm_copy.h"

namespace tandem::transfer::cuda {
namespace {

constexpr uint64_t kBytes = 64ull << 20;

struct Buf {
  int device = 0;
  void* p = nullptr;
  Buf(int d, uint64_t n) : device(d) {
    cudaSetDevice(d);
    EXPECT_EQ(cudaMalloc(&p, n), cudaSuccess);
  }
  ~Buf() {
    cudaSetDevice(device);
    cudaFree(p);
  }
  uint64_t addr() const { return reinterpret_cast<uint64_t>(p); }
};

void CheckCopies(int src_dev, int dst_dev, int ctas) {
  SCOPED_TRACE("cuda:" + std::to_string(src_dev) + " -> cuda:" + std::to_string(dst_dev) + ", " +
               std::to_string(ctas) + " CTAs");
  if (src_dev != dst_dev) {
    int can = 0;
    cudaDeviceCanAccessPeer(&can, src_dev, dst_dev);
    if (!can) GTEST_SKIP() << "no peer access between cuda:" << src_dev << " and cuda:" << dst_dev;
    cudaSetDevice(src_dev);
    cudaDeviceEnablePeerAccess(dst_dev, 0);
    (void)cudaGetLastError();  // already enabled
  }
  Buf src(src_dev, kBytes), dst(dst_dev, kBytes);
  std::vector<uint8_t> pattern(kBytes);
  std::mt19937_64 rng(7);
  for (auto& b : pattern) b = static_cast<uint8_t>(rng());
  ASSERT_EQ(cudaMemcpy(src.p, pattern.data(), kBytes, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dst.p, 0xAB, kBytes), cudaSuccess);
  // 300 ranges (two launches), sizes 0 to 3 MB in 16-byte units, each at a fresh place on both
  // sides with a gap after it; the destinations in reverse order.
  std::vector<SmCopyRange> ranges;
  std::vector<uint64_t> sizes = {16, 48, 0, 65536, 65536 + 16, (3ull << 20) + 32, 4096 * 16 + 4080};
  uint64_t so = 0, total = 0;
  for (int i = 0; i < 300; ++i) {
    const uint64_t len = i < static_cast<int>(sizes.size()) ? sizes[i] : 16 * (1 + rng() % 20000);
    ranges.push_back({0, src.addr() + so, len});
    so += len + 16 * (1 + rng() % 8);
    total += len + 4096;
  }
  ASSERT_LT(so, kBytes);
  ASSERT_LT(total, kBytes);
  uint64_t dof = 0;
  for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) {
    it->dst = dst.addr() + dof;
    dof += it->len + 4096;
  }
  cudaSetDevice(src_dev);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(LaunchSmCopy(ranges.data(), static_cast<int>(ranges.size()), ctas, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaStreamDestroy(s);
  std::vector<uint8_t> got(kBytes);
  ASSERT_EQ(cudaMemcpy(got.data(), dst.p, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<uint8_t> want(kBytes, 0xAB);
  for (const SmCopyRange& r : ranges) {
    std::copy_n(pattern.begin() + (r.src - src.addr()), r.len, want.begin() + (r.dst - dst.addr()));
  }
  uint64_t wrong = 0, first = kBytes;
  for (uint64_t i = 0; i < kBytes; ++i) {
    if (got[i] != want[i]) {
      ++wrong;
      first = std::min(first, i);
    }
  }
  EXPECT_EQ(wrong, 0u) << "first wrong byte at destination offset " << first;
}

TEST(SmCopyTest, ManyRangesWithinOneGpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  CheckCopies(0, 0, 16);
  CheckCopies(0, 0, 1);
  CheckCopies(0, 0, 264);
}

TEST(SmCopyTest, ManyRangesToThePeerGpu) {
  if (CudaDeviceCount() < 2) GTEST_SKIP() << "one CUDA device: no peer";
  CheckCopies(0, 1, 32);  // push: the kernel on the source stores over NVLink
  CheckCopies(1, 0, 32);
}

TEST(SmCopyTest, RefusesUnalignedRangesAndNoCtas) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  Buf a(0, 1 << 20), b(0, 1 << 20);
  SmCopyRange r{b.addr(), a.addr(), 1000};  // not a multiple of 16
  EXPECT_EQ(LaunchSmCopy(&r, 1, 8, nullptr), cudaErrorInvalidValue);
  r = {b.addr() + 8, a.addr(), 1024};
  EXPECT_EQ(LaunchSmCopy(&r, 1, 8, nullptr), cudaErrorInvalidValue);
  r = {b.addr(), a.addr(), 1024};
  EXPECT_EQ(LaunchSmCopy(&r, 1, 0, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchSmCopy(&r, 0, 8, nullptr), cudaSuccess);  // nothing to do
}

}  // namespace
}  // namespace tandem::transfer::cuda
