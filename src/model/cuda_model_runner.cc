// The CUDA ModelRunner (cuda_model_runner.h): the KV pool, batch validation and loading; the step
// itself (inputs, layers, GPU picks, decode graphs) is in cuda_runner_step.cc. Compiled for real
// only in the tandem_model_cuda target (CMake defines TANDEM_HAVE_CUDA there); tandem_model's glob
// sees an empty file.
#ifdef TANDEM_HAVE_CUDA

#include "model/cuda_model_runner.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/device_report.h"
#include "kernels/cuda/kv_block_copy.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/sampling_filter.h"
#include "model/cuda_runner_impl.h"
#include "model/cuda_weights.h"
#include "model/quantization.h"
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
  if (fp8_kv_ && kv_scales_.bytes() == 0) {
    const std::vector<float>& s = kv_scales_host_.values;
    TANDEM_RETURN_IF_ERROR(kv_scales_.Allocate(sizeof(float) * s.size()));
    TANDEM_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(kv_scales_.as<void>(), s.data(), sizeof(float) * s.size(), cudaMemcpyHostToDevice));
  }
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
  layout.dtype = kv_cache_dtype();
  return layout;
}

Status CudaModelRunner::CopyKvBlocks(std::span<const KvBlockCopy> copies) {
  if (copies.empty()) return Status::Ok();
  if (kv_.empty()) return Status(StatusCode::kFailedPrecondition, "CopyKvBlocks: no KV pool");
  TANDEM_RETURN_IF_ERROR(CheckKvBlockCopies(copies, num_blocks_));
  TANDEM_RETURN_IF_ERROR(FlushOnboardLayers());
  return EnqueueKvCopies(copies, stream_, 0);
}

namespace {

enum class KvCopyMethod { kKernel, kEngines, kMemcpy };

// TANDEM_KV_COPY=kernel|engines|memcpy for every KV tier copy; unset: the copy engines on the side
// stream, the kernel on the compute stream (TANDEM_KV_COPY_KERNEL=0, the older switch: memcpy).
KvCopyMethod KvCopyMethodFromEnv(bool side_stream) {
  const char* v = std::getenv("TANDEM_KV_COPY");
  const std::string m = v != nullptr ? v : "";
  if (m == "engines") return KvCopyMethod::kEngines;
  if (m == "memcpy") return KvCopyMethod::kMemcpy;
  const char* old = std::getenv("TANDEM_KV_COPY_KERNEL");
  if (m.empty() && old != nullptr && std::string(old) == "0") return KvCopyMethod::kMemcpy;
  if (!m.empty() && m != "kernel") log::warn("TANDEM_KV_COPY={} is none of kernel, engines, memcpy; the kernel copies", m);
  return m.empty() && side_stream ? KvCopyMethod::kEngines : KvCopyMethod::kKernel;
}

}  // namespace

Status CudaModelRunner::EnqueueKvCopies(std::span<const KvBlockCopy> copies, cudaStream_t stream,
                                        int max_ctas, size_t first_layer, size_t num_layers) {
  if (copies.empty()) return Status::Ok();
  const size_t bb = KVBlockBytes(block_size_) / kv_.size();
  if (num_layers == 0) num_layers = kv_.size() - first_layer;
  // On the compute stream, the copy kernel where the host memory allows: on the H200, 128 blocks
  // of 36 layers host->pool at 50.8 GB/s, 93% of one pinned H2D copy, against 16.0 GB/s for one
  // cudaMemcpyAsync per layer and block (dev/kvtier/results/2026-12-03b-h200-kv-copy-kernel.txt).
  // On the side stream, beside the step's kernels, the copy engines (one cudaMemcpyBatchAsync per
  // direction and layer, no SMs taken): on an H100 through `tandem run`, onboarding at 93-94% of
  // a pinned H2D copy against the kernel's 78-82%, though alone the kernel is faster (92% against
  // 78%) (dev/kvtier/results/2026-12-07d-h100-layerwise-evictions-copy-engines.txt).
  static const KvCopyMethod compute_method = KvCopyMethodFromEnv(false);
  static const KvCopyMethod side_method = KvCopyMethodFromEnv(true);
  const KvCopyMethod method = stream == stream_ ? compute_method : side_method;
  std::vector<void*> bases;
  for (size_t l = first_layer; l < first_layer + num_layers; ++l) bases.push_back(kv_[l].as<void>());
  std::vector<cuda::KvBlockCopyEntry> entries;
  entries.reserve(copies.size());
  for (const KvBlockCopy& c : copies) entries.push_back({c.block_id, c.host + first_layer * bb, c.to_host});
  // A platform whose driver refuses batched copies falls back to the kernel for good (once logged).
  static std::atomic<bool> engines_refused{false};
  if (method == KvCopyMethod::kEngines && stream != nullptr && !engines_refused.load()) {
    Status st = cuda::KvBlockCopyBatched(bases, bb, entries, stream);
    if (st.ok() || st.code() != StatusCode::kInternal) return st;
    if (!engines_refused.exchange(true)) {
      log::warn("KV copies: the copy engines refused a batch ({}); the copy kernel from now on", st.ToString());
    }
  }
  if (method != KvCopyMethod::kMemcpy && cuda::KvBlockCopySupported(bases, bb, entries)) {
    return cuda::KvBlockCopy(bases, bb, entries, stream, max_ctas);
  }
  for (const cuda::KvBlockCopyEntry& e : entries) {
    for (size_t i = 0; i < bases.size(); ++i) {
      char* pool = static_cast<char*>(bases[i]) + static_cast<size_t>(e.block_id) * bb;
      char* host = static_cast<char*>(e.host) + i * bb;
      if (e.to_host) {
        TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, pool, bb, cudaMemcpyDeviceToHost, stream));
      } else {
        TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(pool, host, bb, cudaMemcpyHostToDevice, stream));
      }
    }
  }
  return Status::Ok();
}

Status CudaModelRunner::SyncKvCopies() {
  // Both streams are drained even when ordering the layer-wise copies failed: the caller gives the
  // host slots back after an error, so no copy may still run into or out of them.
  const Status flush = FlushOnboardLayers();
  if (!flush.ok() && onboard_stream_ != nullptr) (void)cudaStreamSynchronize(onboard_stream_);
  const cudaError_t synced = cudaStreamSynchronize(stream_);
  TANDEM_RETURN_IF_ERROR(flush);
  TANDEM_CUDA_RETURN_IF_ERROR(synced);
  return Status::Ok();
}

void* CudaModelRunner::AllocateHostStaging(size_t bytes) {
  void* p = nullptr;
  return cudaMallocHost(&p, bytes) == cudaSuccess ? p : nullptr;
}

void CudaModelRunner::FreeHostStaging(void* p) {
  if (p != nullptr) cudaFreeHost(p);
}

size_t CudaModelRunner::PendingDeviceBytes(int max_num_seqs, int max_model_len) const {
  if (max_num_seqs <= 0 || max_model_len <= 0) return 0;
  size_t pending = 0;
  if (graphs_.mode() == DecodeGraphMode::kOn && block_size_ > 0) {
    const int model_blocks = (config_.max_position_embeddings + block_size_ - 1) / block_size_;
    const int keys = CountDecodeGraphKeys(max_num_seqs, max_model_len, block_size_, model_blocks);
    const size_t left = static_cast<size_t>(std::max(0, keys - graphs_.num_graphs()));
    pending += left * graphs_.max_graph_bytes();
  }
  auto align16 = [](size_t b) { return (b + 15) / 16 * 16; };
  auto more = [](size_t want, const DeviceArray& a) { return want > a.bytes() ? want - a.bytes() : 0; };
  const size_t rows = static_cast<size_t>(
      std::max(max_num_seqs, DecodeBatchBucket(std::min(max_num_seqs, kMaxDecodeGraphBatch))));
  const size_t entries =
      static_cast<size_t>(max_num_seqs) * std::min(config_.vocab_size, max_model_len);
  // SampleOnDevice's layout: specs, penalty entries, their saved logits.
  pending += more(align16(sizeof(cuda::SampleRowSpec) * rows) +
                      align16(sizeof(cuda::PenaltyRowEntry) * entries) +
                      align16(sizeof(float) * entries),
                  sample_);
  constexpr size_t kMaxLogprobs = 20;  // the API's most top_logprobs
  pending += more(rows * kMaxLogprobs * (sizeof(int32_t) + sizeof(float)), topk_);
  if (fp8_kv_ && block_size_ > 0) {  // the prefill's bf16 scratch (StepPlan::fp8_groups)
    const size_t one_seq = static_cast<size_t>((max_model_len + block_size_ - 1) / block_size_) *
                           ScratchBlockBytes();
    pending += more(std::max(kFp8PrefillScratchBytes, one_seq), kv_scratch_);
  }
  return pending;
}

Status CudaModelRunner::Validate(const ForwardBatch& batch) const {
  if (kv_.empty()) return Err(StatusCode::kFailedPrecondition, "Forward before AllocateKVCache");
  return ValidateForwardBatch(batch, config_, block_size_, num_blocks_);
}

Result<std::unique_ptr<ModelRunner>> LoadCudaModelRunner(const std::string& model_dir,
                                                         int device_id,
                                                         const CudaRunnerOptions& options) {
  TANDEM_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(model_dir));
  TANDEM_ASSIGN_OR_RETURN(const QuantizationConfig quant,
                          ResolveQuantization(config.quantization, options.quantization));
  if (quant.enabled()) {
    // The FP8 GEMM's shapes (kernels/cuda/fp8_linear.h): every projection's n and k multiples of 16.
    const int64_t dims[] = {config.hidden_size, config.intermediate_size,
                            static_cast<int64_t>(config.num_attention_heads) * config.head_dim,
                            static_cast<int64_t>(config.num_key_value_heads) * config.head_dim};
    for (int64_t d : dims) {
      if (d % 16 != 0) {
        return Err(StatusCode::kUnimplemented, "CUDA runner: {} weights need hidden, intermediate and head "
                   "dimensions that are multiples of 16 (the FP8 GEMM's), this model has {}", quant.Describe(), d);
      }
    }
  }
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
  TANDEM_ASSIGN_OR_RETURN(const std::string device, cuda::DescribeDevice(device_id));
  if (quant.enabled() && cuda::CurrentDeviceLimits().cc_major != 9) {
    // The GEMV path would run anywhere (sm_80+), but the FP8 GEMMs are cuBLASLt's Hopper kernels.
    return Err(StatusCode::kUnimplemented, "CUDA runner: {} weights need an sm_90 (Hopper) GPU here; "
               "{} is sm_{}{} (--device cpu runs them dequantized)", quant.Describe(), device,
               cuda::CurrentDeviceLimits().cc_major, cuda::CurrentDeviceLimits().cc_minor);
  }
  TANDEM_ASSIGN_OR_RETURN(const KvCacheDtype kv_dtype, ParseKvCacheDtype(options.kv_cache_dtype));
  const bool fp8_kv = kv_dtype == KvCacheDtype::kFp8E4M3;
  // The decode kernel that reads FP8 codes (kernels/cuda/paged_attention.h) is the tensor-core one.
  if (fp8_kv && !cuda::detail::PagedDecodeMmaFits(config.num_attention_heads, config.num_key_value_heads,
                                                  config.head_dim, cuda::CurrentDeviceLimits())) {
    return Err(StatusCode::kUnimplemented, "CUDA runner: --kv-cache-dtype {} needs the tensor-core decode "
               "kernel (sm_80+, head_dim 64 or 128, at most 16 query heads per KV head); {} with {} / {} heads",
               options.kv_cache_dtype, device, config.num_attention_heads, config.num_key_value_heads);
  }
  log::info("{}", device);
  TANDEM_ASSIGN_OR_RETURN(SafetensorsModel st, SafetensorsModel::Open(model_dir));
  std::optional<KvCacheScales> kv_scales;
  if (fp8_kv) {
    TANDEM_ASSIGN_OR_RETURN(kv_scales, LoadKvCacheScales(st, config));
    log::info("KV cache: FP8 E4M3 ({}), half of bf16's bytes; decode attention reads the codes (tensor-core "
              "kernel), prefill a bf16 copy of its sequences' blocks",
              kv_scales->calibrated ? "the checkpoint's k_scale / v_scale" : "scale 1.0 per layer and KV head");
  }
  cuda::KernelShapes shapes;
  shapes.head_dim = config.head_dim;
  shapes.num_heads = config.num_attention_heads;
  shapes.num_kv_heads = config.num_key_value_heads;
  for (const std::string& line : cuda::DescribeKernels(cuda::CurrentDeviceLimits(), shapes)) {
    log::info("kernels on cuda:{}: {}", device_id, line);
  }
  CudaWeightsLoadOptions load;
  load.gpu_memory_utilization = options.gpu_memory_utilization;
  // cuBLAS's workspace and one 16-token KV block besides the caller's part.
  load.reserve_bytes = options.reserve_bytes + CudaModelRunner::kCublasWorkspaceBytes +
                       CudaModelRunner::KVBlockBytesOf(config, 16, fp8_kv);
  load.quantization = quant;
  load.model_name = std::filesystem::path(model_dir).filename().string();
  if (load.model_name.empty()) load.model_name = model_dir;
  TANDEM_ASSIGN_OR_RETURN(CudaWeights weights, LoadCudaWeights(st, config, load));
  TANDEM_ASSIGN_OR_RETURN(cuda::CublasHandle cublas, cuda::CublasHandle::Create());
  cudaStream_t stream = nullptr;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto runner = std::make_unique<CudaModelRunner>(std::move(config), device_id, std::move(weights),
                                                  std::move(cublas), stream, fp8_kv, std::move(kv_scales));
  return std::unique_ptr<ModelRunner>(std::move(runner));
}

}  // namespace tandem

#endif  // TANDEM_HAVE_CUDA
