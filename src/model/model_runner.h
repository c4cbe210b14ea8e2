// ModelRunner: runs the forward pass of a decoder-only transformer over a batch of sequence slices,
// reading and writing a paged KV cache. The CPU runner is the reference backend.
//
// KV cache layout (DESIGN.md section 4): one pool per layer,
//   [num_blocks, 2 (K,V), block_size, num_kv_heads, head_dim], block ids shared by all layers.
// Token at absolute position p of a sequence lives in block block_table[p / block_size],
// slot p % block_size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "kernels/cpu/sample.h"
#include "model/config.h"
#include "model/kv_block_copy.h"
#include "model/step_timeline.h"
#include "model/layer_kv_ready.h"

namespace tandem {

// How the runner picks a kPick slice's token when it samples (engine/sampler.h's rules, stated in
// kernels/cpu/sample.h; the CUDA runner follows them on the GPU with the same u). The engine owns
// the randomness: u is its one UniformDouble draw for this token (unused when temperature <= 0).
struct PickSpec {
  double u = 0.0;
  cpu::SampleSpec sample;  // temperature (<= 0: greedy), top_p, top_k, min_p
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  // The unique ids of prompt + output with their output counts (cpu::MakePenaltyEntries), read
  // only when a penalty is active; owned by the caller for the duration of Execute.
  std::span<const cpu::PenaltyEntry> penalties;
  // Structured outputs: the tokens that may come next, a bitmask (bit t % 32 of word t / 32; ids
  // past its end may not: engine/grammar_state.h), applied after the penalties so that only they
  // can be picked, greedy or sampled. Log-probabilities stay the model's own (the engine sends
  // masked rows that want them through the host instead). Empty: every token. Owned by the
  // caller for the duration of Execute.
  std::span<const uint32_t> allowed;
  bool has_penalties() const {
    return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f;
  }
  bool has_mask() const { return !allowed.empty(); }
};

// One sequence's part of a forward step. Prefill, chunked prefill and decode are the same thing:
// compute `token_ids` at positions [start_pos, start_pos + token_ids.size()), attending to the
// KV of positions [0, start_pos) already in the cache plus the new ones (causal).
struct SequenceSlice {
  std::span<const int32_t> token_ids;    // [num_new_tokens]
  int32_t start_pos = 0;                 // = num_computed_tokens before this step
  std::span<const int32_t> block_table;  // block ids covering positions [0, start_pos + num_new)
  // kPick (ModelRunner::Execute only): the runner picks the token of the slice's last position
  // itself, on its own device, so the logits row need not leave it: greedy when `pick` is null,
  // else sampled by *pick. kArgmax is the old name of kPick.
  enum class Logits { kNone, kLast, kAll, kPick, kArgmax = kPick } logits = Logits::kLast;
  // kPick: -1 no log-probabilities; k >= 0: the chosen token's plus the k best (OpenAI top_logprobs).
  int num_logprobs = -1;
  const PickSpec* pick = nullptr;  // kPick: owned by the caller for the duration of Execute
};

// The pick of one kPick slice: token_id by the sampler's rules (engine/sampler.h; greedy: the
// largest logit, the lowest id on ties); logprob = log_softmax(raw logits)[token_id] (before
// penalties and temperature); top = the num_logprobs largest log-probabilities, best first, ties
// lower id first.
struct ArgmaxSample {
  int32_t token_id = 0;
  float logprob = 0.0f;                         // when num_logprobs >= 0
  std::vector<std::pair<int32_t, float>> top;   // [num_logprobs]
};

// What Execute returns.
struct ForwardOutput {
  std::vector<float> logits;          // as Forward: rows of the kLast / kAll slices only
  std::vector<ArgmaxSample> samples;  // one per kPick slice, in batch order
};

// Where the KV pool lives, for the transfer agent: layer l's block b is the
// `block_bytes` bytes at layer_base[l] + b * block_bytes ([2, block_size, num_kv_heads, head_dim]
// of the runner's KV dtype), so a run of consecutive block ids is one contiguous region.
struct KVCacheLayout {
  std::vector<void*> layer_base;  // [num_layers]
  size_t block_bytes = 0;         // one block of one layer
  int num_blocks = 0;
  int device_id = -1;             // -1: host memory; else the CUDA device
  std::string dtype;              // ModelRunner::kv_cache_dtype(): a KV transfer needs both ends alike
};

struct ForwardBatch {
  std::vector<SequenceSlice> seqs;
  // Optional: called once per layer, in order, after that layer's KV writes of this batch are
  // issued (model/layer_kv_ready.h; block_ids left empty), for layer-wise KV transfer.
  std::function<void(const LayerKVReady&)> on_layer_kv_written;
  // Optional: computes on the host what the picks need and the caller could not give before the
  // forward pass without waiting on it: structured outputs' token bitmasks (PickSpec::allowed,
  // filled in by this call; engine.cc). Execute calls it once (PreparePicks), after the forward
  // pass is enqueued on the device and before it reads any PickSpec's `allowed`, so that this CPU
  // work overlaps the device's (issue 24: the mask of step N computed while step N's forward runs).
  // The engine refuses a step whose hook was not called: its masks would be missing.
  std::function<void()> prepare_picks;
};

// Calls batch.prepare_picks when set (ModelRunner::Execute implementations: once per call).
inline void PreparePicks(const ForwardBatch& batch) {
  if (batch.prepare_picks) batch.prepare_picks();
}

// The memory of the device a runner computes on (bytes), for sizing the KV pool from what is free
// (vLLM's gpu_memory_utilization; engine/kv_cache_sizing.h).
struct DeviceMemoryInfo {
  size_t total_bytes = 0;    // the device's memory (cudaMemGetInfo's total)
  size_t free_bytes = 0;     // free now on the whole device (other processes' use counts)
  size_t used_bytes = 0;     // held by this runner: weights, scratch, KV pool, library workspaces
                             // (the drop in free memory since the runner was created)
  size_t weights_bytes = 0;  // of which the weights
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelConfig& config() const = 0;

  // Allocates the KV pool (replacing any previous one). ResourceExhausted when it cannot.
  virtual Status AllocateKVCache(int num_blocks, int block_size) = 0;
  // Bytes one block takes across all layers (K and V), for sizing the pool.
  virtual size_t KVBlockBytes(int block_size) const = 0;

  // Empty (no layers) before AllocateKVCache.
  virtual KVCacheLayout kv_cache_layout() = 0;
  // The KV pool's element type, as workers compare it before a KV transfer: "fp32" (the CPU
  // runner's default), "bf16" (CUDA's), "fp8_e4m3" (--kv-cache-dtype fp8).
  virtual std::string kv_cache_dtype() const { return "fp32"; }

  // Runs one step. `logits` is resized to [num_rows, vocab_size] row-major, fp32, where the rows
  // are, in the order of batch.seqs: one row per seq with Logits::kLast (its last token), and
  // token_ids.size() rows per seq with Logits::kAll (every token of the slice).
  // Errors: InvalidArgument (token id out of the vocab, a block table too short for the slice,
  // positions beyond max_position_embeddings).
  // Forward treats kPick slices as kNone (no row).
  virtual Status Forward(const ForwardBatch& batch, std::vector<float>* logits) = 0;

  // Forward plus the kPick picks. The default runs Forward with those slices as kLast and
  // picks on the host; a GPU runner overrides it to keep the logits on the device.
  // Errors: those of Forward; InvalidArgument for num_logprobs > vocab_size.
  virtual Status Execute(const ForwardBatch& batch, ForwardOutput* out);
  // True when Execute samples kPick slices with a PickSpec on the runner's own device (the engine
  // then sends every sampling row as a kPick); the default, a host runner: false (the engine
  // samples those rows itself, with the same rules).
  virtual bool SamplesOnDevice() const { return false; }

  // The device's memory now (scratch grown by earlier steps stays held, so a step at the largest
  // batch before this call counts in it). Unimplemented for a host runner (the default): the
  // engine then sizes the KV pool from EngineConfig::kv_cache_bytes alone.
  virtual Result<DeviceMemoryInfo> GetDeviceMemoryInfo();
  // Device memory (bytes) the runner will still allocate while serving steps of at most
  // max_num_seqs sequences and max_model_len tokens, beyond what GetDeviceMemoryInfo reports after
  // the profile run (engine/kv_cache_sizing.h): the CUDA runner's decode graphs for the batch and
  // context buckets the profile did not capture (graphs measured in the profile, times the buckets
  // left) and its sampler's buffers at max_num_seqs rows of max_model_len penalty tokens. The KV
  // pool is sized with this held back. 0 on a host runner.
  virtual size_t PendingDeviceBytes(int max_num_seqs, int max_model_len) const { return 0; }

  // Attaches a timeline (step_timeline.h; null detaches) that Execute adds its host phases to and,
  // with timeline->device_groups, its kernel groups' device time. The caller keeps it alive while
  // attached. The default, a host runner, records nothing.
  virtual void SetStepTimeline(StepTimeline* timeline) {}

  // KV blocks to and from host memory, in order, and ordered before the next Forward / Execute
  // (which may overwrite or read those pool blocks). The default (a host pool): memcpy, done on
  // return. A device runner enqueues them on its stream: the host bytes must stay put until
  // SyncKvCopies returns, and copies into the host are only there after it.
  // Errors: InvalidArgument (a block id outside the pool, a null host pointer), Internal (device).
  virtual Status CopyKvBlocks(std::span<const KvBlockCopy> copies);
  // Waits for the copies CopyKvBlocks enqueued (the default: nothing to wait for).
  virtual Status SyncKvCopies() { return Status::Ok(); }
  // Asynchronous onboarding (a device runner; the KV host tier's H2D copies, kvtier/offloader.h):
  // StartKvOnboard enqueues host -> pool copies (every `to_host` false) on a side stream, after
  // everything enqueued so far (this step's CopyKvBlocks included), so the compute stream's
  // steps go on meanwhile; the caller must not read or write those pool blocks, nor change the
  // host bytes, until PollKvOnboard says the ticket landed (then later work on the compute
  // stream sees them). `wait`: block until it has. `seconds`: the copies' own transfer time
  // (device events), set once landed. Tickets are polled in the order they were started.
  // Errors: InvalidArgument (as CopyKvBlocks), Internal (device), Unimplemented (the default).
  virtual bool AsyncKvOnboard() const { return false; }
  virtual Status StartKvOnboard(std::span<const KvBlockCopy> copies, uint64_t* ticket);
  virtual Status PollKvOnboard(uint64_t ticket, bool wait, bool* landed, double* seconds);
  // Layer-wise copies (a device runner): the copies, both directions, start on a side stream one
  // layer after another (layer l's copies out of the pool, then layer l's copies into it), and the
  // next Execute's layer l waits only for layer l's (that step runs eagerly, not from a graph), so
  // the step computes while the rest of the transfer goes on: evicted blocks leave the pool, and
  // onboarded ones arrive, behind the step's earlier layers. Everything enqueued on the compute
  // stream before the call is copied out as it stands then; later work on the compute stream is
  // ordered after the copies, as with CopyKvBlocks; the host bytes must stay put (and copies into
  // the host are only there) until SyncKvCopies returns. TakeKvLayerCopySeconds: their transfer
  // time by direction (device events around each layer's two parts), of the copies finished since
  // the last call (a layer's time can include the host's enqueueing when the side stream keeps pace
  // with it; a direction without copies counts none). Errors: InvalidArgument (as CopyKvBlocks),
  // FailedPrecondition (no KV pool), Internal (device), Unimplemented.
  virtual bool LayerwiseKvCopies() const { return false; }
  virtual Status StartKvCopiesByLayer(std::span<const KvBlockCopy> copies);
  virtual KvCopySeconds TakeKvLayerCopySeconds() { return {}; }
  // Host memory for the KV host tier: page-locked on a device runner (so its copies run
  // asynchronously at the link's speed), plain on a host runner. Null when it cannot.
  virtual void* AllocateHostStaging(size_t bytes);
  virtual void FreeHostStaging(void* p);
};

// Checks a batch against a KV pool of `num_blocks` blocks of `block_size` tokens (both runners call
// it first). InvalidArgument, naming the slice: no tokens, a negative start_pos, positions beyond
// config.max_position_embeddings, a token id outside [0, vocab_size), a block table shorter than
// the slice's positions need, or a block id outside [0, num_blocks).
Status ValidateForwardBatch(const ForwardBatch& batch, const ModelConfig& config, int block_size,
                            int num_blocks);

// The host pick of ArgmaxSample from one row of logits: [vocab_size].
ArgmaxSample PickArgmax(std::span<const float> logits, int num_logprobs);
// The same with a PickSpec (null: PickArgmax): penalties on a copy of the row, then
// cpu::SampleWithUniform(spec->u); log-probabilities of the raw row.
ArgmaxSample PickToken(std::span<const float> logits, int num_logprobs, const PickSpec* spec);

// The CPU reference runner: fp32 math on the stored (bf16/f16/f32) weights, loaded from a
// Hugging Face model directory (config.json + model.safetensors or a sharded index). FP8
// checkpoints are dequantized at load; `quantization` is --quantization (model/quantization.h:
// "" the checkpoint's own, "fp8" per-channel FP8 weights for an unquantized one).
// Errors: NotFound (missing files), DataLoss (truncated safetensors), InvalidArgument (a tensor
// missing or whose shape disagrees with config.json, an unknown --quantization, FP8 scales
// missing or misshapen), Unimplemented (unknown architecture or quantization method).
// `kv_cache_dtype` is --kv-cache-dtype (model/quantization.h: "auto", "fp8", "fp8_e4m3").
Result<std::unique_ptr<ModelRunner>> LoadCpuModelRunner(const std::string& model_dir,
                                                        const std::string& quantization = "",
                                                        const std::string& kv_cache_dtype = "auto");

}  // namespace tandem
