// Device-resident model weights for the CUDA runner (cuda_model_runner.h): bf16, one allocation
// per tensor, q/k/v and gate/up fused row-wise so each is one GEMM. Built only with CUDA
// (TANDEM_HAVE_CUDA; target tandem_model_cuda).
//
// Shapes ([out, in] row-major, Hugging Face names in model/weights.h; the plan in weight_plan.h):
//   qkv      [(num_heads + 2 num_kv_heads) * head_dim, hidden]   q_proj, k_proj, v_proj rows
//   gate_up  [2 * intermediate, hidden]                          gate_proj rows, then up_proj rows
//
// Loading reads the mapped safetensors straight into the device tensors: BF16 bytes are copied as
// stored, F16/F32 converted per chunk on the host, through two pinned staging buffers (one filled
// by host threads while the other is copied), so the host holds the mapping plus the staging
// buffers, never an fp32 copy of the model.
#pragma once

#ifdef TANDEM_HAVE_CUDA

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/model_runner.h"
#include "model/quantization.h"
#include "model/safetensors.h"

namespace tandem {

// An owned device allocation. Allocate: ResourceExhausted when the device is out of memory
// (the CUDA error is cleared), Internal for other CUDA errors.
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; o.bytes_ = 0; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) { Reset(); p_ = o.p_; bytes_ = o.bytes_; o.p_ = nullptr; o.bytes_ = 0; }
    return *this;
  }
  ~DeviceArray() { Reset(); }

  Status Allocate(size_t bytes);
  // Grows (never shrinks) to at least `bytes`; the contents are not kept.
  Status Reserve(size_t bytes) { return bytes <= bytes_ ? Status::Ok() : Allocate(bytes); }
  void Reset();
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// With FP8 weights (CudaWeights::fp8) qkv, o, gate_up and down hold e4m3 codes (1 byte each, same
// shapes) and *_scale their fp32 scales (kernels/cuda/fp8_linear.h: [rows] per channel, or
// [rows / 128, Fp8BlockScaleCols(cols)] in 128 x 128 blocks, as each projection's *_block128 says).
struct DeviceLayer {
  DeviceArray input_norm;  // [hidden]
  DeviceArray qkv;         // [(nh + 2 nkv) * hd, hidden]
  DeviceArray qkv_bias;    // [(nh + 2 nkv) * hd] or empty
  DeviceArray o;           // [hidden, nh * hd]
  DeviceArray o_bias;      // [hidden] or empty
  DeviceArray q_norm;      // [hd] or empty
  DeviceArray k_norm;      // [hd] or empty
  DeviceArray post_norm;   // [hidden]
  DeviceArray gate_up;     // [2 * inter, hidden]
  DeviceArray down;        // [hidden, inter]
  DeviceArray qkv_scale, o_scale, gate_up_scale, down_scale;  // FP8 only
  bool qkv_block128 = false, o_block128 = false, gate_up_block128 = false, down_block128 = false;
};

struct CudaWeights {
  DeviceArray embed;       // [vocab, hidden]
  DeviceArray final_norm;  // [hidden]
  DeviceArray lm_head;     // [vocab, hidden]; empty when tied (use embed)
  DeviceArray inv_freq;    // fp32 [head_dim / 2], RoPE inverse frequencies (kernels/cpu/rope.h)
  std::vector<DeviceLayer> layers;

  bool fp8 = false;        // the layers' projections are FP8 (DeviceLayer)
  std::string fp8_describe;  // the scheme, the projections per scale layout, the kernels (the log)

  const DeviceArray& lm_head_or_embed() const { return lm_head.bytes() > 0 ? lm_head : embed; }
  size_t bytes() const;    // device bytes held

  // cudaMemGetInfo's free bytes on the device before the weights were allocated: the baseline of
  // DeviceMemoryInfo::used_bytes (QueryDeviceMemory).
  size_t device_free_before_load = 0;
};

struct CudaWeightsLoadOptions {
  size_t staging_bytes = 128u << 20;  // each of the two pinned staging buffers
  int num_threads = 0;                // host threads filling a chunk; 0: min(8, cores)
  // Checked before the first copy (device_memory_plan.h CheckWeightsFit): the weights plus
  // reserve_bytes must fit in gpu_memory_utilization x the device's memory and in what is free.
  double gpu_memory_utilization = 1.0;
  size_t reserve_bytes = 0;
  std::string model_name = "the model";  // for that error
  // Enabled: the layers' projections stay FP8 on the device (fp8_pack.h: the checkpoint's block
  // scales where they are 128 x 128, else per channel; --quantization fp8 quantizes per channel).
  QuantizationConfig quantization;
};

// Loads every tensor the config calls for onto the current CUDA device as bf16 (weight_plan.h),
// logging the time and rate. Errors: those of LoadModelWeights with the same messages
// (InvalidArgument naming a missing or misshapen tensor, Unimplemented dtype), ResourceExhausted
// (the weights do not fit the budget, naming the sizes; device memory, naming the tensor),
// Internal (CUDA).
Result<CudaWeights> LoadCudaWeights(const SafetensorsModel& st, const ModelConfig& config,
                                    const CudaWeightsLoadOptions& options = {});

// The device's memory now (model_runner.h's DeviceMemoryInfo): used_bytes is the drop in free
// memory since before `weights` were loaded (weights, scratch, KV pool, cuBLAS workspaces; other
// processes allocating meanwhile count too). Internal on a CUDA error.
Result<DeviceMemoryInfo> QueryDeviceMemory(int device_id, const CudaWeights& weights);

}  // namespace tandem

#endif  // TANDEM_HAVE_CUDA
