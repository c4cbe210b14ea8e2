// The limits of a GPU that the CUDA ops size their launches by (SM count, shared memory per block,
// registers), read once per device from the CUDA runtime (cudaDeviceGetAttribute) and cached.
// Plain C++ for nvcc and the host compiler alike (no common/status.h: .cu files include it).
//
// Why per device: the ops' shared-memory tiles and grid shapes differ across the GPUs tandem is
// built for (CMake TANDEM_CUDA_ARCHS): 227 KiB of opt-in shared memory per block on sm_90 and
// sm_100, 163 KiB on sm_80, 99 KiB on sm_86 / sm_89 / sm_120 (CUDA C++ Programming Guide,
// "Compute Capabilities", table of technical specifications); 132 SMs on an H200 SXM, 142 on an
// L40S, 108 on an A100, 80 on an A10G.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace tandem::cuda {

struct DeviceLimits {
  int device = -1;
  int cc_major = 0;  // compute capability, e.g. 9.0 for Hopper, 8.9 for Ada
  int cc_minor = 0;
  int sm_count = 0;
  size_t smem_per_block_optin = 0;  // bytes a block may use after cudaFuncSetAttribute
  size_t smem_per_sm = 0;           // bytes per multiprocessor
  int regs_per_sm = 0;              // 32-bit registers per multiprocessor
  int max_threads_per_sm = 0;
  size_t l2_bytes = 0;
  int mem_bus_width_bits = 0;  // global memory bus width
  int mem_clock_khz = 0;       // peak memory clock (kHz); 0 when the runtime does not say
  // Peak DRAM bandwidth from the bus width and the memory clock (two transfers a clock), bytes/s;
  // 0 when the memory clock is unknown. A datasheet-like figure, not a measurement.
  double PeakBandwidthBytesPerSecond() const;
};

// Reads `device`'s limits (not cached). cudaSuccess, or the runtime's error (no such device).
cudaError_t QueryDeviceLimits(int device, DeviceLimits* out);

// The limits of the calling thread's current device (cudaGetDevice), cached per device for the
// process (thread-safe). When the runtime cannot answer (no device), an H200's values with
// device = -1, so that host-side planning code still gets numbers. The environment variable
// TANDEM_CUDA_SMEM_LIMIT_KIB=N lowers smem_per_block_optin to N KiB (a rehearsal knob: on an
// H200, N = 99 makes the ops choose what they choose on an L40S, A10G or RTX 50).
const DeviceLimits& CurrentDeviceLimits();

// The code the runtime loads for the current device, from an empty kernel compiled like every
// other op (cudaFuncGetAttributes): binary_version is the SASS architecture (e.g. 90), ptx_version
// the PTX it came from (the same number for SASS built ahead, the build's compute_NN when the driver
// compiled PTX at load). cudaErrorNoKernelImageForDevice (or cudaErrorInvalidDeviceFunction) when
// the build has neither SASS for this device nor PTX it can compile (CMake TANDEM_CUDA_ARCHS).
cudaError_t ProbeLoadedCode(int* binary_version, int* ptx_version);

}  // namespace tandem::cuda
