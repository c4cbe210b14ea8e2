// The CUDA ModelRunner (model_runner.h) on one GPU: bf16 weights and KV cache, fp32 accumulation,
// the ops of src/kernels/cuda. Same architectures, inputs and outputs as the CPU runner (logits are
// returned to the host as fp32), so the engine can use either.
//
// Built only with the CUDA toolkit (CMake: TANDEM_HAVE_CUDA; target tandem_model_cuda); the
// definition lives in cuda_model_runner.cc behind TANDEM_HAVE_CUDA.
//
// KV pool: one device allocation per layer, [num_blocks, 2, block_size, num_kv_heads, head_dim]
// bf16 (kv_cache_layout().device_id = the GPU). Weights: q/k/v and gate/up are fused into one
// GEMM each. Each Forward synchronizes its stream before returning the logits.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "model/model_runner.h"

namespace tandem {

struct CudaRunnerOptions {
  // The weights must fit in this share of the device's memory (and in what is free) with
  // reserve_bytes + the runner's own minimum (cuBLAS's workspace, one KV block) to spare; else
  // ResourceExhausted naming the sizes before anything is copied (device_memory_plan.h).
  double gpu_memory_utilization = 1.0;
  size_t reserve_bytes = 0;
  // --quantization (model/quantization.h). FP8 weights, asked for or in the checkpoint, keep the
  // layers' projections in FP8 on the device (kernels/cuda/fp8_linear.h; model/fp8_pack.h);
  // Unimplemented on GPUs other than sm_90 (named at load, before anything is copied).
  std::string quantization;
  // --kv-cache-dtype (model/quantization.h): "auto" keeps bf16; "fp8" / "fp8_e4m3" stores K and V
  // as FP8 E4M3 with per-KV-head scales of 1.0 (half of bf16's bytes per block; decode reads the
  // codes, prefill a bf16 copy of its sequences' blocks: kernels/cuda/paged_attention.h,
  // kv_dequant.h). Unimplemented where the tensor-core decode kernel does not run (sm_80+, at
  // most 16 query heads per KV head).
  std::string kv_cache_dtype = "auto";
};

// Logs the GPU (name, compute capability, memory and bandwidth class, the code loaded for it) and
// the kernel family of each op on it (kernels/cuda/device_report.h), then loads the weights.
// Errors: those of LoadCpuModelRunner (files, tensors, config), InvalidArgument (no such CUDA
// device), FailedPrecondition (this build has no code for the device's compute capability),
// Internal (a CUDA error), ResourceExhausted (the weights do not fit on the GPU).
Result<std::unique_ptr<ModelRunner>> LoadCudaModelRunner(const std::string& model_dir,
                                                         int device_id,
                                                         const CudaRunnerOptions& options = {});

}  // namespace tandem
