// Whether a model's weights fit on a GPU before any of them is copied there (issue 19: memory
// planning that fits a 48 GB card). Host arithmetic only, so it is tested without a GPU; the CUDA
// runner calls it with cudaMemGetInfo's numbers (model/cuda_weights.cc).
//
// The budget is vLLM's reading of --gpu-memory-utilization: a worker may hold
// gpu_memory_utilization x the device's total memory, and never more than is free on the device
// (other processes count). The weights must fit in it with `reserve_bytes` to spare: what every
// step needs besides them and the KV pool (engine.h kDeviceMemoryMarginBytes, cuBLAS's workspace,
// the step scratch of a small step) and at least one KV block's room, or the server would load
// the weights and then fail to size any KV cache (engine/kv_cache_sizing.h).
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace tandem {

struct WeightsFitInput {
  std::string model;              // for the message: the model directory's name
  std::string device;             // for the message: "cuda:0 (NVIDIA L40S)"
  size_t weights_bytes = 0;       // what the weights take on the device (weight_plan.h)
  size_t reserve_bytes = 0;       // the rest a worker needs at the least (module comment)
  double gpu_memory_utilization = 0.9;  // (0, 1]
  size_t total_bytes = 0;         // the device's memory (cudaMemGetInfo's total)
  size_t free_bytes = 0;          // free on the device now
};

// OK when gpu_memory_utilization is in (0, 1], else InvalidArgument (the message names the value).
// The one check of the fraction: the weights-fit check and the KV pool's sizing both call it.
Status CheckGpuMemoryUtilization(double gpu_memory_utilization);

// OK when weights_bytes + reserve_bytes <= min(gpu_memory_utilization * total_bytes, free_bytes).
// Errors: InvalidArgument (gpu_memory_utilization outside (0, 1]), ResourceExhausted naming the
// model, the device, the weights' size, the reserve, the utilization's share of the device, the
// free memory and the smallest --gpu-memory-utilization that would fit (when one <= 1 would).
Status CheckWeightsFit(const WeightsFitInput& in);

}  // namespace tandem
