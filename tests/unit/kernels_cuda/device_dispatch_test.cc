// Kernel choice by the device (issue 19), without a GPU: the prefill kernel PagedPrefill takes on
// the shared memory and SM counts of the GPUs tandem is built for (the CUDA C++ Programming
// Guide's per-compute-capability limits), and the bandwidth class the worker logs against the
// vendors' datasheet figures (A100 80GB 2,039 GB/s, A10G 600 GB/s, L40S 864 GB/s, H200 4.8 TB/s).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernels/cuda/device_report.h"
#include "kernels/cuda/paged_attention.h"

namespace tandem::cuda {
namespace {

DeviceLimits Gpu(int major, int minor, int sms, int smem_kib, int bus_bits, int mem_khz) {
  DeviceLimits d;
  d.cc_major = major;
  d.cc_minor = minor;
  d.sm_count = sms;
  d.smem_per_block_optin = static_cast<size_t>(smem_kib) * 1024;
  d.smem_per_sm = d.smem_per_block_optin + 1024;
  d.mem_bus_width_bits = bus_bits;
  d.mem_clock_khz = mem_khz;
  return d;
}

// The values cudaDeviceGetAttribute reports on each (bus width, memory clock in kHz).
const DeviceLimits kA100 = Gpu(8, 0, 108, 163, 5120, 1593000);
const DeviceLimits kA10G = Gpu(8, 6, 80, 99, 384, 6251000);
const DeviceLimits kL40S = Gpu(8, 9, 142, 99, 384, 9001000);
const DeviceLimits kH200 = Gpu(9, 0, 132, 227, 6016, 3201000);  // as the device machine reported

PagedPrefillArgs Qwen3_8bPrefill(int tokens) {
  PagedPrefillArgs a;
  a.head_dim = 128;
  a.num_heads = 32;
  a.num_kv_heads = 8;
  a.num_seqs = 1;
  a.max_query_len = tokens;
  return a;
}

class DeviceDispatch : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("TANDEM_PREFILL_KERNEL") != nullptr) GTEST_SKIP() << "TANDEM_PREFILL_KERNEL set";
  }
};

PagedDecodeArgs Qwen3_8bDecode(int head_dim = 128, int num_heads = 32, int num_kv_heads = 8) {
  PagedDecodeArgs a;
  a.head_dim = head_dim;
  a.num_heads = num_heads;
  a.num_kv_heads = num_kv_heads;
  return a;
}

// The tensor-core decode kernel: 3 stages (106.25 KiB) where two such CTAs fit an SM (H200's
// 228 KiB), else 2 (72.25 KiB: two CTAs on an A100's 164 KiB, one on an L40S's 100 KiB); the
// CUDA-core kernel for head_dim 256, more than 16 query heads per KV head, or before sm_80.
TEST(DecodeDispatch, TheMmaKernelTakesTheStagesTheDeviceHolds) {
  if (std::getenv("TANDEM_DECODE_KERNEL") != nullptr) GTEST_SKIP() << "TANDEM_DECODE_KERNEL set";
  EXPECT_EQ(detail::PagedDecodeMmaStages(128, kH200), 3);
  EXPECT_EQ(detail::PagedDecodeMmaCtasPerSm(128, kH200), 2);
  EXPECT_EQ(detail::PagedDecodeMmaStages(128, kA100), 2);
  EXPECT_EQ(detail::PagedDecodeMmaCtasPerSm(128, kA100), 2);
  EXPECT_EQ(detail::PagedDecodeMmaStages(128, kL40S), 2);
  EXPECT_EQ(detail::PagedDecodeMmaCtasPerSm(128, kL40S), 1);
  EXPECT_EQ(detail::PagedDecodeMmaStages(256, kH200), 0);
  for (const DeviceLimits* d : {&kH200, &kA100, &kA10G, &kL40S}) {
    EXPECT_EQ(detail::ChoosePagedDecodeKernel(Qwen3_8bDecode(), *d), DecodeKernel::kMma);
    EXPECT_EQ(detail::ChoosePagedDecodeKernel(Qwen3_8bDecode(64, 4, 2), *d), DecodeKernel::kMma);
    EXPECT_EQ(detail::ChoosePagedDecodeKernel(Qwen3_8bDecode(256, 8, 4), *d), DecodeKernel::kSimt);
    EXPECT_EQ(detail::ChoosePagedDecodeKernel(Qwen3_8bDecode(128, 32, 1), *d), DecodeKernel::kSimt);
  }
  PagedDecodeArgs simt = Qwen3_8bDecode();
  simt.kernel = DecodeKernel::kSimt;
  EXPECT_EQ(detail::ChoosePagedDecodeKernel(simt, kH200), DecodeKernel::kSimt);
  const DeviceLimits turing = Gpu(7, 5, 40, 64, 256, 5001000);
  EXPECT_EQ(detail::ChoosePagedDecodeKernel(Qwen3_8bDecode(), turing), DecodeKernel::kSimt);
}

// Its split choice (paged_attention.h's table): one wave of CTAs, never a second mostly empty one.
TEST(DecodeDispatch, MmaSplitsMakeOneWave) {
  EXPECT_EQ(PagedDecodeChooseMmaSplits(1, 8, 4096, 132, 2), 33);   // 264 CTAs of 128 keys
  EXPECT_EQ(PagedDecodeChooseMmaSplits(1, 8, 1024, 132, 2), 16);   // 64 keys each
  EXPECT_EQ(PagedDecodeChooseMmaSplits(8, 8, 16384, 132, 2), 4);   // 256 CTAs, not 320
  EXPECT_EQ(PagedDecodeChooseMmaSplits(33, 8, 1024, 132, 2), 1);
  EXPECT_EQ(PagedDecodeChooseMmaSplits(1, 8, 4096, 142, 1), 17);   // L40S: one CTA per SM
  EXPECT_EQ(PagedDecodeChooseMmaSplits(1, 8, 40, 132, 2), 1);
  EXPECT_EQ(PagedDecodeChooseMmaSplits(0, 8, 40, 132, 2), 1);
}

TEST_F(DeviceDispatch, PrefillTilesFitTheDevicesSharedMemory) {
  const size_t smem128 = detail::PagedPrefillSmemBytes(PrefillKernel::kMma128, 128);
  const size_t smem64 = detail::PagedPrefillSmemBytes(PrefillKernel::kMma64, 128);
  ASSERT_GT(smem128, kL40S.smem_per_block_optin);  // 136 KiB > 99 KiB
  ASSERT_LE(smem64, kL40S.smem_per_block_optin);
  ASSERT_LE(smem128, kA100.smem_per_block_optin);
  // Hopper takes the warpgroup-MMA kernel at head_dim 128 whenever the build holds sm_90a code
  // (TANDEM_CUDA_ARCHS naming 90a), for long and short prompts alike; it fits 227 KiB, not 163.
  const size_t smem_wgmma = detail::PagedPrefillSmemBytes(PrefillKernel::kWgmma, 128);
  ASSERT_LE(smem_wgmma, kH200.smem_per_block_optin);
  ASSERT_GT(smem_wgmma, kA100.smem_per_block_optin);
  EXPECT_EQ(detail::PagedPrefillSmemBytes(PrefillKernel::kWgmma, 64), 0u);
  const PrefillKernel h200_long = detail::PagedPrefillWgmmaBuilt() ? PrefillKernel::kWgmma
                                                                     : PrefillKernel::kMma128;
  const PrefillKernel h200_short = detail::PagedPrefillWgmmaBuilt() ? PrefillKernel::kWgmma
                                                                      : PrefillKernel::kMma64;
  // A 2k-token prompt: 16 x 32 = 512 CTAs of 128 queries, over two waves everywhere.
  EXPECT_EQ(detail::ChoosePagedPrefillKernel(Qwen3_8bPrefill(2048), kH200), h200_long);
  EXPECT_EQ(detail::ChoosePagedPrefillKernel(Qwen3_8bPrefill(2048), kA100), PrefillKernel::kMma128);
  EXPECT_EQ(detail::ChoosePagedPrefillKernel(Qwen3_8bPrefill(2048), kL40S), PrefillKernel::kMma64);
  EXPECT_EQ(detail::ChoosePagedPrefillKernel(Qwen3_8bPrefill(2048), kA10G), PrefillKernel::kMma64);
  // A short prompt (under two waves): 64-query tiles everywhere but on Hopper.
  EXPECT_EQ(detail::ChoosePagedPrefillKernel(Qwen3_8bPrefill(100), kH200), h200_short);
  EXPECT_EQ(detail::ChoosePagedPrefillKernel(Qwen3_8bPrefill(100), kA100), PrefillKernel::kMma64);
  // head_dim 64 on Hopper: the mma.sync kernels.
  PagedPrefillArgs hd64 = Qwen3_8bPrefill(2048);
  hd64.head_dim = 64;
  EXPECT_EQ(detail::ChoosePagedPrefillKernel(hd64, kH200), PrefillKernel::kMma128);
  // Asked for where it does not apply, the Hopper kernel gives way to the automatic choice.
  PagedPrefillArgs wg = Qwen3_8bPrefill(2048);
  wg.kernel = PrefillKernel::kWgmma;
  EXPECT_EQ(detail::ChoosePagedPrefillKernel(wg, kA100), PrefillKernel::kMma128);
  // A device with too little for either mma.sync kernel falls back to the WMMA kernel.
  DeviceLimits tiny = kL40S;
  tiny.smem_per_block_optin = smem64 - 16;
  EXPECT_EQ(detail::ChoosePagedPrefillKernel(Qwen3_8bPrefill(2048), tiny), PrefillKernel::kWmma);
  // An explicit choice stands.
  PagedPrefillArgs a = Qwen3_8bPrefill(2048);
  a.kernel = PrefillKernel::kMma128;
  EXPECT_EQ(detail::ChoosePagedPrefillKernel(a, kL40S), PrefillKernel::kMma128);
}

TEST_F(DeviceDispatch, TheReportSaysWhichTilesEachDeviceUses) {
  KernelShapes s;
  std::string l40s, h200;
  for (const std::string& line : DescribeKernels(kL40S, s)) l40s += line + "\n";
  for (const std::string& line : DescribeKernels(kH200, s)) h200 += line + "\n";
  EXPECT_NE(l40s.find("large batches: mma.sync m16n8k16, 64-query tiles"), std::string::npos) << l40s;
  EXPECT_NE(h200.find(detail::PagedPrefillWgmmaBuilt()
                          ? "large batches: FlashAttention-3 style wgmma m64n128k16 (sm_90a)"
                          : "large batches: mma.sync m16n8k16, 128-query tiles"),
            std::string::npos)
      << h200;
  EXPECT_NE(l40s.find("compute capability 8.9"), std::string::npos) << l40s;
}

double PeakGBs(const DeviceLimits& d) { return d.PeakBandwidthBytesPerSecond() / 1e9; }

TEST(DeviceReport, PeakBandwidthMatchesTheDatasheets) {
  EXPECT_NEAR(PeakGBs(kA100), 2039, 2039 * 0.03);
  EXPECT_NEAR(PeakGBs(kA10G), 600, 600 * 0.03);
  EXPECT_NEAR(PeakGBs(kL40S), 864, 864 * 0.03);
  EXPECT_NEAR(PeakGBs(kH200), 4800, 4800 * 0.03);
  EXPECT_EQ(BandwidthClass(kL40S).rfind("GDDR 384-bit", 0), 0u) << BandwidthClass(kL40S);
  EXPECT_EQ(BandwidthClass(kH200).rfind("HBM 6016-bit", 0), 0u) << BandwidthClass(kH200);
  EXPECT_EQ(ArchitectureName(8, 0), "Ampere");
  EXPECT_EQ(ArchitectureName(8, 6), "Ampere");
  EXPECT_EQ(ArchitectureName(8, 9), "Ada");
  EXPECT_EQ(ArchitectureName(9, 0), "Hopper");
  EXPECT_EQ(ArchitectureName(10, 0), "Blackwell");
  EXPECT_EQ(ArchitectureName(12, 0), "Blackwell");
}

}  // namespace
}  // namespace tandem::cuda
