// The CUDA ModelRunner's class (cuda_model_runner.h), shared by its two sources:
// cuda_model_runner.cc (KV pool, validation, loading) and cuda_runner_step.cc (the step: inputs,
// layers, GPU picks, decode graphs). Internal: include it from those two only. Built only with CUDA
// (TANDEM_HAVE_CUDA; target tandem_model_cuda).
#pragma once

#ifdef TANDEM_HAVE_CUDA

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <initializer_list>
#include <deque>
#include <map>
#include <memory>
#include <optional>

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/gemm_tune.h"
#include "kernels/cuda/linear.h"
#include "model/config.h"
#include "model/cuda_decode_graphs.h"
#include "model/cuda_weights.h"
#include "model/kv_scales.h"
#include "model/model_runner.h"

namespace tandem {

class CudaModelRunner final : public ModelRunner {
 public:
  // kv_scales: FP8 KV's per-layer scales (model/kv_scales.h; all 1.0 when absent).
  CudaModelRunner(ModelConfig config, int device_id, CudaWeights weights, cuda::CublasHandle cublas,
                  cudaStream_t stream, bool fp8_kv = false, std::optional<KvCacheScales> kv_scales = std::nullopt)
      : config_(std::move(config)), device_id_(device_id), w_(std::move(weights)),
        cublas_(std::move(cublas)), stream_(stream), fp8_kv_(fp8_kv),
        kv_scales_host_(kv_scales ? std::move(*kv_scales) : UnitKvCacheScales(config_)) {}
  ~CudaModelRunner() override {
    cudaSetDevice(device_id_);
    for (cudaEvent_t e : layer_events_) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    for (cudaEvent_t e : timeline_events_) cudaEventDestroy(e);
    DestroyOnboard();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }


  const ModelConfig& config() const override { return config_; }

  // Bytes one KV block of `block_size` tokens takes across all layers (K and V, bf16 or FP8
  // codes), for a config before a runner exists (the weights-fit check at load) and for
  // KVBlockBytes.
  static size_t KVBlockBytesOf(const ModelConfig& c, int block_size, bool fp8_kv) {
    return static_cast<size_t>(c.num_hidden_layers) * 2 * block_size * c.num_key_value_heads *
           c.head_dim * (fp8_kv ? 1 : sizeof(__nv_bfloat16));
  }
  size_t KVBlockBytes(int block_size) const override { return KVBlockBytesOf(config_, block_size, fp8_kv_); }
  std::string kv_cache_dtype() const override { return fp8_kv_ ? "fp8_e4m3" : "bf16"; }
  // FP8 KV: the bf16 scratch pool the prefill slices' blocks are gathered into, per layer
  // (StepPlan::fp8_groups): at most this many bytes unless one sequence needs more.
  static constexpr size_t kFp8PrefillScratchBytes = size_t{256} << 20;
  // Bytes of one block of one layer in that scratch pool (bf16 K and V).
  size_t ScratchBlockBytes() const { return KVBlockBytesOf(config_, block_size_, false) / config_.num_hidden_layers; }
  // cuBLAS gets its workspace from us (graph capture cannot let it allocate one); 32 MiB is what
  // cuBLAS asks for on Hopper.
  static constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

  Status AllocateKVCache(int num_blocks, int block_size) override;
  KVCacheLayout kv_cache_layout() override;
  // used_bytes is the drop in the device's free memory since the weights began to load, capped
  // by what this runner allocated itself (weights, KV pool, step scratch) plus kContextAllowance
  // for the CUDA context, kernels and library state: the drop alone also counts other processes'
  // allocations made meanwhile (two workers starting together on one GPU).
  Result<DeviceMemoryInfo> GetDeviceMemoryInfo() override {
    TANDEM_ASSIGN_OR_RETURN(DeviceMemoryInfo m, QueryDeviceMemory(device_id_, w_));  // cuda_weights.h
    size_t own = w_.bytes();
    for (const DeviceArray& a : kv_) own += a.bytes();
    for (const DeviceArray* a : {&meta_, &graph_meta_, &residual_, &hidden_, &qkv_, &attn_,
                                 &gate_up_, &act_, &sel_, &logits_, &workspace_, &picks_, &lse_ws_, &topk_, &sample_,
                                 &cublas_workspace_, &fp8_scratch_, &kv_scratch_, &kv_scales_}) {
      own += a->bytes();
    }
    m.used_bytes = std::min(m.used_bytes, own + kContextAllowance);
    return m;
  }
  static constexpr size_t kContextAllowance = size_t{1} << 30;
  // The decode graphs of the keys not yet captured (CountDecodeGraphKeys minus those captured, at
  // the largest capture measured so far) and the sampler's device buffers at max_num_seqs rows of
  // min(vocab, max_model_len) penalty tokens and 20 log-probabilities each, less what they hold.
  size_t PendingDeviceBytes(int max_num_seqs, int max_model_len) const override;
  Status Forward(const ForwardBatch& batch, std::vector<float>* logits) override;
  Status Execute(const ForwardBatch& batch, ForwardOutput* out) override;
  bool SamplesOnDevice() const override { return true; }
  void SetStepTimeline(StepTimeline* timeline) override { timeline_ = timeline; }
  // The KV host tier's copies on the runner's stream (so the next step's kernels see them in
  // order): the copy kernel (kv_block_copy.h), or one cudaMemcpyAsync per layer and block where
  // the host memory is not device-accessible or with TANDEM_KV_COPY_KERNEL=0; staging from
  // cudaMallocHost.
  Status CopyKvBlocks(std::span<const KvBlockCopy> copies) override;
  Status SyncKvCopies() override;
  // Onboarding on a side stream (cuda_runner_onboard.cc): it waits for an event recorded on the
  // compute stream at the call, then copies (the copy engines by default, EnqueueKvCopies) between
  // two timing events; a landed ticket's end event is also waited for by the compute stream.
  bool AsyncKvOnboard() const override { return true; }
  Status StartKvOnboard(std::span<const KvBlockCopy> copies, uint64_t* ticket) override;
  Status PollKvOnboard(uint64_t ticket, bool wait, bool* landed, double* seconds) override;
  // Layer-wise, on the same side stream: per layer its copies out, an event, its copies in, an
  // event (what RunModel's layer l waits for).
  bool LayerwiseKvCopies() const override { return true; }
  Status StartKvCopiesByLayer(std::span<const KvBlockCopy> copies) override;
  KvCopySeconds TakeKvLayerCopySeconds() override;
  void* AllocateHostStaging(size_t bytes) override;
  void FreeHostStaging(void* p) override;

 private:
  struct StepPlan;
  Status Validate(const ForwardBatch& batch) const;
  // Forward (picks = false: kPick slices get no row) and Execute (picks = true).
  Status Step(const ForwardBatch& batch, bool picks, ForwardOutput* out);
  // Enqueues the layers, the logits and the greedy picks of a planned step.
  Status RunModel(const StepPlan& p, const char* meta);
  // The PickSpec rows of a step, after RunModel (eagerly, also after a graph replay): penalties,
  // cuda::SampleRows over the pick rows (ids and status into picks_), the raw logits restored,
  // the chosen raw logit into the picks' max column. Sets p.sampled; nothing without PickSpecs.
  Status SampleOnDevice(StepPlan& p);
  // Records layer `layer`'s KV-written event on the stream and calls *layer_hook_ (layer-wise
  // transfer, ForwardBatch::on_layer_kv_written).
  Status ReportLayerKV(int layer);
  // Padded decode steps (cuda_runner_layers.cc): tunes the step's projection shapes (qkv, o,
  // gate_up, down at m = p.T over every layer's matrix; lm_head at m = p.rows) on the step's
  // scratch before the step runs (eagerly or captured into a graph), once per shape; m <=
  // GemvMaxM() (the GEMV's) are left alone. Nothing without tuner_.
  Status TuneProjections(const StepPlan& p);
  // StepTimeline::device_groups (cuda_runner_timeline.cc): MarkGroup records an event on the
  // stream closing kernel group `group` (the first mark of a step opens it: "start");
  // CollectGroups, after the step's synchronize, adds each group's elapsed time to timeline_ and
  // forgets the marks. Both do nothing without a device-group timeline.
  bool timing_groups() const { return timeline_ != nullptr && timeline_->device_groups; }
  bool timing_groups_in_graphs() const { return timing_groups() && timeline_->device_groups_in_graphs; }
  Status MarkGroup(const char* group);
  Status CollectGroups();
  // Grows a device buffer the decode graphs point into (bumps graph_generation_ when it moves).
  Status ReserveTracked(DeviceArray& a, size_t bytes);
  Status InitOnce();

  ModelConfig config_;
  int device_id_;
  CudaWeights w_;
  cuda::CublasHandle cublas_;
  std::unique_ptr<cuda::GemmTuner> tuner_;  // InitOnce; null with TANDEM_GEMM_TUNE=0 or no cuBLASLt
  std::unique_ptr<cuda::Fp8Gemm> fp8_gemm_;  // InitOnce, with FP8 weights (w_.fp8)
  // SwiGLU fused into the down projection's FP8 activation quantization on the GEMM path
  // (cuda::SiluMulQuantizeFp8) from this many tokens a step on (and always above GemvMaxM());
  // TANDEM_FUSED_SILU_QUANT (read at InitOnce): 0 keeps the two kernels, N > 0 sets the count
  // (checks run the fused path on short prompts); default 64 (measured at 64, 256 and 2048 tokens:
  // dev/kernels/results/2026-12-04c-*).
  int fused_silu_quant_min_tokens_ = 64;
  // FP8 GEMM path: RMSNorm writes the next projection's activation codes (RmsNormQuantizeFp8) at
  // every step with more than GemvMaxM() tokens; TANDEM_FUSED_NORM_QUANT=0 turns it off.
  bool fused_norm_quant_ = true;
  // The copies on `stream` of layers [first_layer, first_layer + num_layers) (0: to the last),
  // by the copy kernel (its grid bounded by max_ctas, 0: none; the compute stream's default), the
  // copy engines (a side stream's default) or one cudaMemcpyAsync per layer and block
  // (TANDEM_KV_COPY=kernel|engines|memcpy picks one for both).
  Status EnqueueKvCopies(std::span<const KvBlockCopy> copies, cudaStream_t stream, int max_ctas,
                         size_t first_layer = 0, size_t num_layers = 0);
  void DestroyOnboard();  // waits for the onboarding in flight; frees its stream and events
  Status EnsureOnboardStream();
  Status TakeOnboardEvents(cudaEvent_t* start, cudaEvent_t* end);
  void DrainOnboard();  // the side stream synchronized, every ticket dropped
  Status PollOne(uint64_t ticket, bool wait, bool* landed, double* seconds);
  // Layer-wise copies the compute stream has not waited for yet (no step ran since): it waits for
  // all of them now.
  Status FlushOnboardLayers();

  cudaStream_t stream_;
  struct OnboardFlight {
    uint64_t ticket = 0;
    cudaEvent_t start = nullptr, end = nullptr;
  };
  cudaStream_t onboard_stream_ = nullptr;   // created on first use
  cudaEvent_t onboard_ready_ = nullptr;     // the compute stream's point each onboarding waits for
  std::deque<OnboardFlight> onboard_flights_;  // started, not landed, in ticket order
  std::vector<cudaEvent_t> onboard_spare_;     // events to reuse
  uint64_t onboard_next_ = 0;
  // Layer-wise copies (StartKvCopiesByLayer), one flight at a time, its events reused flight after
  // flight (timing events): start, then per layer l mid[l] after its copies out of the pool and
  // layer[l] after its copies into it (what RunModel's layer l waits for).
  std::vector<cudaEvent_t> onboard_layer_events_;  // [layers]
  std::vector<cudaEvent_t> onboard_mid_events_;    // [layers]
  cudaEvent_t onboard_layer_start_ = nullptr;
  bool onboard_layers_pending_ = false;  // the next RunModel waits for them, layer by layer
  bool layered_untimed_ = false;         // the last flight's times not yet in layered_seconds_
  bool layered_has_out_ = false, layered_has_in_ = false;  // the last flight's directions
  KvCopySeconds layered_seconds_;        // finished flights' times, until TakeKvLayerCopySeconds
  Status EnqueueByLayer(std::span<const KvBlockCopy> copies);
  void CollectLayerTimes(bool wait);
  std::vector<DeviceArray> kv_;  // per layer [num_blocks, 2, block_size, nkv, hd], bf16 or FP8
  bool fp8_kv_ = false;          // --kv-cache-dtype fp8
  KvCacheScales kv_scales_host_;  // FP8 KV: the checkpoint's scales (or 1.0), uploaded with the pools
  DeviceArray kv_scales_;         // FP8 KV: kv_scales_host_.values on the device, [layers, 2, nkv] fp32
  DeviceArray kv_scratch_;       // FP8 KV: the prefill's bf16 blocks (grown on demand)
  int num_blocks_ = 0;
  int block_size_ = 0;
  // Step scratch, grown on demand (ReserveTracked: graphs hold their addresses).
  DeviceArray meta_, graph_meta_, residual_, hidden_, qkv_, attn_, gate_up_, act_, sel_, logits_,
      workspace_, picks_, lse_ws_, topk_, sample_, cublas_workspace_, fp8_scratch_;
  PinnedBuffer host_meta_, host_picks_, host_sample_;
  DecodeGraphCache graphs_{DecodeGraphModeFromEnv()};
  const std::function<void(const LayerKVReady&)>* layer_hook_ = nullptr;  // during a Step only
  std::vector<cudaEvent_t> layer_events_;  // [num_layers], created on first use
  StepTimeline* timeline_ = nullptr;       // SetStepTimeline
  std::vector<cudaEvent_t> timeline_events_;  // grown on demand, reused step after step
  std::vector<const char*> timeline_marks_;   // this step's marks: the group each event closes
  std::vector<const char*> capture_marks_;    // the marks of a graph being captured
  std::map<std::pair<int, int>, std::vector<const char*>> graph_marks_;  // each timed graph's
  uint64_t graph_generation_ = 1;
  bool initialized_ = false;
};

}  // namespace tandem

#endif  // TANDEM_HAVE_CUDA
