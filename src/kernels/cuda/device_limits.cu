// Per-device limits (device_limits.h).
#include "kernels/cuda/device_limits.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>

namespace tandem::cuda {
namespace {

constexpr int kMaxDevices = 64;

// One H200 SXM (the device machine's GPU), for callers without a device.
DeviceLimits H200Fallback() {
  DeviceLimits d;
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.smem_per_block_optin = 232448;
  d.smem_per_sm = 233472;
  d.regs_per_sm = 65536;
  d.max_threads_per_sm = 2048;
  d.l2_bytes = 60u << 20;
  d.mem_bus_width_bits = 6016;  // what an H200 SXM reports (4.81 TB/s at 3201 MHz)
  d.mem_clock_khz = 3201000;
  return d;
}

__global__ void ProbeKernel() {}

}  // namespace

cudaError_t ProbeLoadedCode(int* binary_version, int* ptx_version) {
#ifdef TANDEM_CUDA_EMU
  *binary_version = *ptx_version = 90;
  return cudaSuccess;
#else
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, ProbeKernel);
  if (err != cudaSuccess) return err;
  *binary_version = attr.binaryVersion;
  *ptx_version = attr.ptxVersion;
  return cudaSuccess;
#endif
}

double DeviceLimits::PeakBandwidthBytesPerSecond() const {
  return 2.0 * static_cast<double>(mem_clock_khz) * 1e3 * mem_bus_width_bits / 8.0;
}

cudaError_t QueryDeviceLimits(int device, DeviceLimits* out) {
#ifdef TANDEM_CUDA_EMU
  *out = H200Fallback();
  out->device = device;
  return cudaSuccess;
#else
  DeviceLimits d;
  d.device = device;
  int v = 0;
  struct Attr {
    cudaDeviceAttr attr;
    int* dst;
  };
  int smem_optin = 0, smem_sm = 0, l2 = 0;
  const Attr attrs[] = {
      {cudaDevAttrComputeCapabilityMajor, &d.cc_major},
      {cudaDevAttrComputeCapabilityMinor, &d.cc_minor},
      {cudaDevAttrMultiProcessorCount, &d.sm_count},
      {cudaDevAttrMaxSharedMemoryPerBlockOptin, &smem_optin},
      {cudaDevAttrMaxSharedMemoryPerMultiprocessor, &smem_sm},
      {cudaDevAttrMaxRegistersPerMultiprocessor, &d.regs_per_sm},
      {cudaDevAttrMaxThreadsPerMultiProcessor, &d.max_threads_per_sm},
      {cudaDevAttrL2CacheSize, &l2},
      {cudaDevAttrGlobalMemoryBusWidth, &d.mem_bus_width_bits},
  };
  for (const Attr& a : attrs) {
    const cudaError_t err = cudaDeviceGetAttribute(a.dst, a.attr, device);
    if (err != cudaSuccess) return err;
  }
  // The memory clock is deprecated in newer runtimes and may be refused: 0 then.
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, device) == cudaSuccess) {
    d.mem_clock_khz = v;
  } else {
    cudaGetLastError();
  }
  d.smem_per_block_optin = static_cast<size_t>(smem_optin);
  d.smem_per_sm = static_cast<size_t>(smem_sm);
  d.l2_bytes = static_cast<size_t>(l2);
  *out = d;
  return cudaSuccess;
#endif
}

const DeviceLimits& CurrentDeviceLimits() {
  static const DeviceLimits fallback = H200Fallback();
  static std::array<DeviceLimits, kMaxDevices> cache;
  static std::array<std::atomic<bool>, kMaxDevices> ready{};
  static std::mutex mu;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) {
    cudaGetLastError();
    return fallback;
  }
  if (ready[device].load(std::memory_order_acquire)) return cache[device];
  std::lock_guard<std::mutex> lock(mu);
  if (!ready[device].load(std::memory_order_relaxed)) {
    DeviceLimits d;
    if (QueryDeviceLimits(device, &d) != cudaSuccess || d.sm_count <= 0) {
      cudaGetLastError();
      return fallback;
    }
    // TANDEM_CUDA_SMEM_LIMIT_KIB=N: plan as if a block could have at most N KiB of shared memory
    // (e.g. 99 on an H200 to take the kernel choices of an L40S or A10G; the header's comment).
    if (const char* cap = std::getenv("TANDEM_CUDA_SMEM_LIMIT_KIB"); cap != nullptr) {
      const long kib = std::strtol(cap, nullptr, 10);
      if (kib > 0 && static_cast<size_t>(kib) * 1024 < d.smem_per_block_optin) {
        d.smem_per_block_optin = static_cast<size_t>(kib) * 1024;
        d.smem_per_sm = std::min(d.smem_per_sm, d.smem_per_block_optin + 1024);
      }
    }
    cache[device] = d;
    ready[device].store(true, std::memory_order_release);
  }
  return cache[device];
}

}  // namespace tandem::cuda
