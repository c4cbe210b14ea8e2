// The CUDA ModelRunner (cuda_model_runner.h): the KV pool, batch validation and loading; the step
// itself (inputs, layers, GPU picks, decode graphs) is in cuda_runner_step.cc. Compiled for real
// only in the tandem_model_cuda target (CMake defines TANDEM_HAVE_CUDA there); tandem_model's glob
// sees an empty file.
#ifdef TANDEM_HAVE_CUDA

#include "model/cuda_model_runner.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/linear.h"
#include "model/cuda_runner_impl.h"
#include "model/cuda_weights.h"
#include "model/safetensors.h"

namespace tandem {
namespace {
using bf16 = __nv_bfloat16;
}  // namespace

Status CudaModelRunner::AllocateKVCache(int num_blocks, int block_size) {
  if (num_blocks <= 0 || block_size <= 0) {
    return Err(StatusCode::kInvalidArgument, "KV cache needs num_blocks > 0 and block_size > 0, "
               "got {} and {}", num_blocks, block_size);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_id_));
  kv_.clear();
  num_blocks_ = 0;
  block_size_ = 0;
  const size_t per_layer = KVBlockBytes(block_size) / config_.num_hidden_layers * num_blocks;
  std::vector<DeviceArray> pools(config_.num_hidden_layers);
  for (DeviceArray& pool : pools) {
    Status st = pool.Allocate(per_layer);
    if (!st.ok()) {
      return Status(st.code(), fmt::format("KV cache of {} blocks x {} bytes: {}", num_blocks,
                                           KVBlockBytes(block_size), st.message()));
    }
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMemset(pool.as<void>(), 0, per_layer));
  }
  kv_ = std::move(pools);
  ++graph_generation_;  // captured decode graphs point into the old pools
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  return Status::Ok();
}

KVCacheLayout CudaModelRunner::kv_cache_layout() {
  KVCacheLayout layout;
  if (kv_.empty()) return layout;
  for (DeviceArray& pool : kv_) layout.layer_base.push_back(pool.as<void>());
  layout.block_bytes = KVBlockBytes(block_size_) / kv_.size();
  layout.num_blocks = num_blocks_;
  layout.device_id = device_id_;
  return layout;
}

Status CudaModelRunner::Validate(const ForwardBatch& batch) const {
  if (kv_.empty()) return Err(StatusCode::kFailedPrecondition, "Forward before AllocateKVCache");
  return ValidateForwardBatch(batch, config_, block_size_, num_blocks_);
}

Result<std::unique_ptr<ModelRunner>> LoadCudaModelRunner(const std::string& model_dir,
                                                         int device_id) {
  TANDEM_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(model_dir));
  if (config.head_dim != 64 && config.head_dim != 128) {
    return Err(StatusCode::kUnimplemented, "CUDA runner: head_dim {} (the prefill kernel has 64 "
               "and 128)", config.head_dim);
  }
  int count = 0;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (device_id < 0 || device_id >= count) {
    return Err(StatusCode::kInvalidArgument, "CUDA device {} does not exist ({} present)",
               device_id, count);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_id));
  TANDEM_ASSIGN_OR_RETURN(SafetensorsModel st, SafetensorsModel::Open(model_dir));
  TANDEM_ASSIGN_OR_RETURN(CudaWeights weights, LoadCudaWeights(st, config));
  TANDEM_ASSIGN_OR_RETURN(cuda::CublasHandle cublas, cuda::CublasHandle::Create());
  cudaStream_t stream = nullptr;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto runner = std::make_unique<CudaModelRunner>(std::move(config), device_id, std::move(weights),
                                                  std::move(cublas), stream);
  return std::unique_ptr<ModelRunner>(std::move(runner));
}

}  // namespace tandem

#endif  // TANDEM_HAVE_CUDA
