// Device weights for the CUDA runner (cuda_weights.h). Compiled for real only in the
// tandem_model_cuda target (TANDEM_HAVE_CUDA); tandem_model's glob sees an empty file.
#ifdef TANDEM_HAVE_CUDA

#include "model/cuda_weights.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/cuda_check.h"
#include "model/device_memory_plan.h"
#include "model/fp8_pack.h"
#include "model/weight_plan.h"

namespace tandem {

Status DeviceArray::Allocate(size_t bytes) {
  Reset();
  if (bytes == 0) return Status::Ok();
  const cudaError_t e = cudaMalloc(&p_, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // clear it: out of memory is an answer, not a sticky fault
    p_ = nullptr;
    return Err(StatusCode::kResourceExhausted, "cudaMalloc of {} bytes: out of device memory",
               bytes);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(e);
  bytes_ = bytes;
  return Status::Ok();
}

void DeviceArray::Reset() {
  if (p_ != nullptr) cudaFree(p_);
  p_ = nullptr;
  bytes_ = 0;
}

size_t CudaWeights::bytes() const {
  size_t n = embed.bytes() + final_norm.bytes() + lm_head.bytes() + inv_freq.bytes();
  for (const DeviceLayer& l : layers) {
    n += l.input_norm.bytes() + l.qkv.bytes() + l.qkv_bias.bytes() + l.o.bytes() +
         l.o_bias.bytes() + l.q_norm.bytes() + l.k_norm.bytes() + l.post_norm.bytes() +
         l.gate_up.bytes() + l.down.bytes() + l.qkv_scale.bytes() + l.o_scale.bytes() +
         l.gate_up_scale.bytes() + l.down_scale.bytes();
  }
  return n;
}

namespace {

// Pinned host memory (cudaMallocHost), freed on destruction.
class StagingBuffer {
 public:
  StagingBuffer() = default;
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;
  ~StagingBuffer() {
    if (p_ != nullptr) cudaFreeHost(p_);
  }
  Status Allocate(size_t bytes) {
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p_, bytes));
    return Status::Ok();
  }
  uint16_t* data() const { return static_cast<uint16_t*>(p_); }

 private:
  void* p_ = nullptr;
};

// A stream and one event per staging buffer, destroyed on exit (also on errors).
struct CopyResources {
  cudaStream_t stream = nullptr;
  cudaEvent_t done[2] = {nullptr, nullptr};
  ~CopyResources() {
    for (cudaEvent_t e : done) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (stream != nullptr) {
      cudaStreamSynchronize(stream);  // no copy may outlive the staging buffers
      cudaStreamDestroy(stream);
    }
  }
};

// The device tensor of each planned one.
std::vector<std::pair<const DeviceTensorPlan*, DeviceArray*>> Bind(const WeightPlan& plan,
                                                                   CudaWeights* w) {
  std::vector<std::pair<const DeviceTensorPlan*, DeviceArray*>> out = {
      {&plan.embed, &w->embed}, {&plan.final_norm, &w->final_norm}, {&plan.lm_head, &w->lm_head}};
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const LayerPlan& p = plan.layers[i];
    DeviceLayer& d = w->layers[i];
    out.insert(out.end(), {{&p.input_norm, &d.input_norm}, {&p.qkv, &d.qkv},
                           {&p.qkv_bias, &d.qkv_bias}, {&p.o, &d.o}, {&p.o_bias, &d.o_bias},
                           {&p.q_norm, &d.q_norm}, {&p.k_norm, &d.k_norm},
                           {&p.post_norm, &d.post_norm}, {&p.gate_up, &d.gate_up},
                           {&p.down, &d.down}});
  }
  return out;
}

Status UploadInvFreq(const ModelConfig& c, DeviceArray* out) {
  cpu::RopeParams rope;
  rope.theta = c.rope_theta;
  rope.type = c.rope_scaling.type;
  rope.factor = c.rope_scaling.factor;
  rope.low_freq_factor = c.rope_scaling.low_freq_factor;
  rope.high_freq_factor = c.rope_scaling.high_freq_factor;
  rope.original_max_position_embeddings = c.rope_scaling.original_max_position_embeddings;
  const std::vector<float> inv_freq = cpu::RopeInvFreq(c.head_dim, rope);
  TANDEM_RETURN_IF_ERROR(out->Allocate(inv_freq.size() * sizeof(float)));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpy(out->as<float>(), inv_freq.data(),
                                         inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice));
  return Status::Ok();
}

// Device bytes of the layers' projections in FP8: codes plus at most one scale per row.
size_t Fp8LinearBytes(const ModelConfig& c) {
  size_t n = 0;
  for (const FusedLinear& f : LayerLinears(c, 0)) {
    int64_t rows = 0;
    for (const LinearPart& p : f.parts) rows += p.rows;
    n += static_cast<size_t>(rows * f.cols) + static_cast<size_t>(rows) * 4;
  }
  return n * static_cast<size_t>(c.num_hidden_layers);
}

Status Upload(const void* src, size_t bytes, DeviceArray* dst, const std::string& what) {
  Status st = dst->Allocate(bytes);
  if (!st.ok()) return Status(st.code(), fmt::format("weights: {}: {}", what, st.message()));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst->as<void>(), src, bytes, cudaMemcpyHostToDevice));
  return Status::Ok();
}

// Packs (fp8_pack.h) and uploads every layer's four projections, layers spread over `threads`
// host threads (each packing one layer at a time). Sets the block flags and w->fp8_describe.
Status LoadFp8Linears(const SafetensorsModel& st, const ModelConfig& c, const QuantizationConfig& q,
                      int device, int threads, CudaWeights* w) {
  const int layers = c.num_hidden_layers;
  std::vector<Status> status(static_cast<size_t>(threads));
  std::atomic<int> next{0};
  std::atomic<int> blocks{0}, channels{0}, requantized{0}, from_unquantized{0};
  std::atomic<bool> failed{false};  // one worker's error stops the others at their next layer
  auto work = [&](int t) {
    Status& out = status[static_cast<size_t>(t)];
    if (cudaSetDevice(device) != cudaSuccess) {
      out = Err(StatusCode::kInternal, "cudaSetDevice({}) in a loader thread", device);
      return;
    }
    for (int l = next++; l < layers && out.ok() && !failed; l = next++) {
      DeviceLayer& d = w->layers[static_cast<size_t>(l)];
      const std::pair<DeviceArray*, DeviceArray*> dst[] = {
          {&d.qkv, &d.qkv_scale}, {&d.o, &d.o_scale}, {&d.gate_up, &d.gate_up_scale}, {&d.down, &d.down_scale}};
      bool* block_flags[] = {&d.qkv_block128, &d.o_block128, &d.gate_up_block128, &d.down_block128};
      const std::vector<FusedLinear> linears = LayerLinears(c, l);
      for (size_t i = 0; i < linears.size() && out.ok(); ++i) {
        Result<Fp8PackedLinear> packed = PackFp8Linear(st, linears[i].parts, linears[i].cols, q);
        if (!packed.ok()) {
          out = packed.status();
          break;
        }
        const std::string what = fmt::format("layers.{}.{}", l, linears[i].name);
        out = Upload(packed->codes.data(), packed->codes.size(), dst[i].first, what);
        if (out.ok()) out = Upload(packed->scales.data(), packed->scales.size() * 4, dst[i].second, what + " scales");
        *block_flags[i] = packed->block128;
        ++(packed->block128 ? blocks : channels);
        requantized += packed->requantized ? 1 : 0;
        from_unquantized += packed->from_unquantized ? 1 : 0;
      }
    }
  };
  auto worker = [&](int t) {
    try {
      work(t);
    } catch (const std::exception& e) {  // std::bad_alloc of a part's float copy, above all
      status[static_cast<size_t>(t)] = Err(StatusCode::kResourceExhausted, "packing FP8 weights: {}", e.what());
    }
    if (!status[static_cast<size_t>(t)].ok()) failed = true;
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t);
  for (std::thread& th : pool) th.join();
  for (const Status& s : status) TANDEM_RETURN_IF_ERROR(s);
  w->fp8 = true;
  w->fp8_describe = fmt::format("{}: {} projections with 128x128 block scales, {} per channel{}; decode "
                                "batches up to 8 through tandem's FP8 GEMV, larger ones through cuBLASLt's FP8 GEMM",
                                q.Describe(), blocks.load(), channels.load(),
                                (requantized > 0 ? fmt::format(" ({} requantized per channel from other "
                                                               "blocks)", requantized.load())
                                                 : std::string()) +
                                    (from_unquantized > 0 && q.source != "online"
                                         ? fmt::format(" ({} with parts the checkpoint left unquantized, "
                                                       "quantized per channel at load)", from_unquantized.load())
                                         : std::string()));
  return Status::Ok();
}

}  // namespace

Result<CudaWeights> LoadCudaWeights(const SafetensorsModel& st, const ModelConfig& c,
                                    const CudaWeightsLoadOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const bool fp8 = options.quantization.enabled();
  TANDEM_ASSIGN_OR_RETURN(const WeightPlan plan, PlanBf16Weights(st, c, fp8));
  const size_t fp8_bytes = fp8 ? Fp8LinearBytes(c) : 0;
  CudaWeights out;
  size_t total = 0;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&out.device_free_before_load, &total));
  {
    int device = 0;
    cudaDeviceProp prop{};
    TANDEM_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
    TANDEM_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
    WeightsFitInput fit;
    fit.model = options.model_name;
    fit.device = fmt::format("cuda:{} ({})", device, prop.name);
    fit.weights_bytes = plan.total_bytes() + fp8_bytes;
    fit.reserve_bytes = options.reserve_bytes;
    fit.gpu_memory_utilization = options.gpu_memory_utilization;
    fit.total_bytes = total;
    fit.free_bytes = out.device_free_before_load;
    TANDEM_RETURN_IF_ERROR(CheckWeightsFit(fit));
  }
  out.layers = std::vector<DeviceLayer>(c.num_hidden_layers);
  std::map<const DeviceTensorPlan*, DeviceArray*> device;
  for (const auto& [t, d] : Bind(plan, &out)) {
    if (t->parts.empty()) continue;
    device[t] = d;
    Status st_alloc = d->Allocate(t->bytes());
    if (!st_alloc.ok()) {
      return Status(st_alloc.code(),
                    fmt::format("weights: {} ({} bytes; {} of {} bytes of weights): {}", t->name,
                                t->bytes(), out.bytes(), plan.total_bytes(), st_alloc.message()));
    }
  }

  const std::vector<StagingChunk> chunks = ScheduleStaging(plan, options.staging_bytes);
  size_t staging = 0;
  for (const StagingChunk& ch : chunks) staging = std::max(staging, ch.bytes);
  StagingBuffer buffers[2];
  CopyResources copy;
  if (staging > 0) {
    for (StagingBuffer& b : buffers) TANDEM_RETURN_IF_ERROR(b.Allocate(staging));
    TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&copy.stream, cudaStreamNonBlocking));
    for (cudaEvent_t& e : copy.done) {
      TANDEM_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
    }
  }
  const int threads = options.num_threads > 0
                          ? options.num_threads
                          : static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  // Chunk i fills buffer i % 2 once that buffer's previous copies are done, then copies it.
  for (size_t i = 0; i < chunks.size(); ++i) {
    const StagingChunk& ch = chunks[i];
    const int b = static_cast<int>(i % 2);
    if (i >= 2) TANDEM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(copy.done[b]));
    FillStagingChunk(ch, buffers[b].data(), threads);
    ReleaseChunkSources(ch);  // the bytes are in the staging buffer now
    for (const StagingPiece& p : ch.pieces) {
      char* dst = device.at(p.tensor)->as<char>() + p.dst_offset * 2;
      TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst,
                                                  reinterpret_cast<const char*>(buffers[b].data()) +
                                                      p.staging_offset,
                                                  static_cast<size_t>(p.count) * 2,
                                                  cudaMemcpyHostToDevice, copy.stream));
    }
    TANDEM_CUDA_RETURN_IF_ERROR(cudaEventRecord(copy.done[b], copy.stream));
  }
  if (copy.stream != nullptr) TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy.stream));
  TANDEM_RETURN_IF_ERROR(UploadInvFreq(c, &out.inv_freq));
  if (fp8) {
    int device = 0;
    TANDEM_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
    TANDEM_RETURN_IF_ERROR(LoadFp8Linears(st, c, options.quantization, device, threads, &out));
  }

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double bytes = static_cast<double>(out.bytes() - out.inv_freq.bytes());
  if (fp8) log::info("weights: {}", out.fp8_describe);
  log::info("weights: {:.2f} GiB{} onto the GPU in {:.2f} s ({:.2f} GB/s), {} tensors from {} "
            "file(s), {} staging chunks of up to {} MiB, {} host threads",
            bytes / (1ull << 30), fp8 ? " (fp8 projections, the rest bf16)" : " bf16", seconds, seconds > 0 ? bytes / seconds / 1e9 : 0.0,
            plan.tensors().size() + (fp8 ? 8 * static_cast<size_t>(c.num_hidden_layers) : 0), st.num_files(),
            chunks.size(), staging >> 20, threads);
  return out;
}

Result<DeviceMemoryInfo> QueryDeviceMemory(int device_id, const CudaWeights& weights) {
  TANDEM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_id));
  DeviceMemoryInfo m;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
  m.used_bytes = weights.device_free_before_load > m.free_bytes
                     ? weights.device_free_before_load - m.free_bytes
                     : weights.bytes();
  m.weights_bytes = weights.bytes();
  return m;
}

}  // namespace tandem

#endif  // TANDEM_HAVE_CUDA
