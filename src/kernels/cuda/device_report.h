// What a CUDA worker says at start about its GPU and the kernels each op takes there (issue 19:
// one build for every supported GPU, kernels chosen by the device): the GPU's name, compute
// capability and architecture, SMs, memory and its bandwidth class, shared memory per block, the
// code the runtime loaded (SASS built ahead, or PTX compiled by the driver), and per op the kernel
// family (cuBLAS, tandem's GEMV, which attention tiles fit the device's shared memory ...).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/cuda/device_limits.h"

namespace tandem::cuda {

// The shapes that decide the kernel choice (a model's config.json values).
struct KernelShapes {
  int head_dim = 128;
  int num_heads = 32;
  int num_kv_heads = 8;
};

// The architecture of a compute capability: "Ampere" (8.0, 8.6, 8.7), "Ada" (8.9), "Hopper"
// (9.0), "Blackwell" (10.x, 11.x, 12.x); "unknown" otherwise.
std::string ArchitectureName(int cc_major, int cc_minor);
// "HBM" for a bus of 2048 bits or more, else "GDDR", with the peak bandwidth when known, e.g.
// "HBM 6016-bit, 4.81 TB/s peak" on an H200.
std::string BandwidthClass(const DeviceLimits& d);

// One line on `device` (it becomes the current device): name, compute capability, SMs, memory,
// bandwidth class, L2, shared memory, and the code loaded for it. Errors: Internal (CUDA), and
// FailedPrecondition when this build holds no code the device can run (the message names the
// build's TANDEM_CUDA_ARCHS and the CMake flag that adds the device).
Result<std::string> DescribeDevice(int device);

// "op: kernel family" lines for the ops of the CUDA runner on `limits`' device at `shapes`.
std::vector<std::string> DescribeKernels(const DeviceLimits& limits, const KernelShapes& shapes);

// The architectures this build's CUDA code was compiled for (CMake TANDEM_CUDA_ARCHS, ';' -> ',').
const char* BuiltCudaArchs();

}  // namespace tandem::cuda
