// Engine: continuous batching over a paged KV cache with prefix caching (vLLM v1 shape).
//
//   step() = schedule -> run model -> sample -> post-process (detokenize, stop checks)
//
// Greedy requests without penalties are picked by the runner (ModelRunner::Execute, kArgmax: on a
// GPU only the token and its logprobs leave the device); the others' logits rows come back to the
// host sampler (sampler.h). Both give the same tokens and logprobs.
//
// The scheduler thinks in tokens: each step moves every running request's num_computed_tokens
// toward its num_tokens under a token budget; prefill, chunked prefill and decode are one mechanism.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/kv_events.h"
#include "engine/sampling_params.h"
#include "model/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace tandem {

struct EngineConfig {
  int block_size = 16;                 // tokens per KV block
  int num_kv_blocks = 0;               // 0: from kv_cache_bytes
  // KV pool size when num_kv_blocks == 0. 0: a host runner gets kDefaultHostKVCacheBytes; a
  // device runner (ModelRunner::GetDeviceMemoryInfo) gets what gpu_memory_utilization leaves
  // after its weights and the scratch of the largest step (vLLM's profile run; kv_cache_sizing.h).
  // ResourceExhausted when that cannot hold one max_model_len request.
  size_t kv_cache_bytes = 0;
  // The fraction of the device's total memory this engine may use for weights, step scratch and
  // the KV pool (vLLM's meaning: two workers sharing a GPU take e.g. 0.45 each).
  double gpu_memory_utilization = 0.9;
  int max_num_seqs = 64;               // running requests at most
  int max_num_batched_tokens = 2048;   // token budget of one step (chunked prefill splits prompts)
  int max_model_len = 0;               // 0: the model's max_position_embeddings
  bool enable_prefix_caching = true;
  // Conditional disaggregation (decode worker): a request added with allow_remote_prefill whose
  // uncached prompt tokens exceed this is prefilled remotely (see RemotePrefillTask); at or under
  // it, locally.
  int max_local_prefill_tokens = 0;
  // Host tier for prefix blocks the KV pool evicts (issue 26; kvtier/offloader.h): bytes of host
  // memory (page-locked for a device pool), 0 off. Needs enable_prefix_caching.
  size_t kv_offload_host_bytes = 0;
  // Disk tier below the host tier (kvtier/disk_tier.h): a directory and its size in bytes (0 off;
  // needs the host tier). Its file keeps blocks across restarts of the same model and layout
  // (kv_offload_model_id names the model; the layout and dtype are added to it).
  std::string kv_offload_disk_dir;
  size_t kv_offload_disk_bytes = 0;
  std::string kv_offload_model_id;
  // How long a request waits for its prefix's blocks to come up from the disk (then the rest is
  // recomputed).
  int kv_offload_disk_wait_ms = 1000;
  // --quantization, for the runner loader (model/quantization.h): "" the checkpoint's own, "fp8".
  std::string quantization;
  // --kv-cache-dtype (model/quantization.h): "auto", "fp8", "fp8_e4m3".
  std::string kv_cache_dtype = "auto";
  // --threads: the CPU runner's threads (0: common/cpu_cores.h UsableCores(), the affinity mask
  // capped by the cgroup CPU quota). The CUDA runner ignores it.
  int cpu_threads = 0;
  // --async-scheduling (vLLM's name; issue 23): the overlapped loop of engine_overlap.cc. While
  // step N runs on a forward thread, Step() schedules and prepares step N+1 from the predicted
  // state (each request of N one token further), then detokenizes N's tokens and checks stop
  // strings; a request a stop string ends computes one wasted row of N+1. The same tokens as the
  // synchronous loop. Steps run synchronously while a KV offload tier, a step timeline or a
  // request with layer-wise KV callbacks is present.
  bool async_scheduling = false;
};

inline constexpr size_t kDefaultHostKVCacheBytes = 256u << 20;
// Held back from the device KV pool for what the profile run does not allocate (CUDA graphs,
// the allocator's rounding, library workspaces created later).
inline constexpr size_t kDeviceMemoryMarginBytes = 512u << 20;

// Per-request roles in disaggregated serving (DESIGN.md section 1).
struct RequestOptions {
  // Decode worker: at admission, if the prompt's uncached tokens exceed
  // EngineConfig::max_local_prefill_tokens, reserve KV blocks for the whole prompt and hand out a
  // RemotePrefillTask instead of computing it; the request then waits for CompleteRemotePrefill or
  // FailRemotePrefill (which falls back to local prefill).
  bool allow_remote_prefill = false;
  // Decode worker: the prefill worker the frontend's router chose for this request (a discovery
  // instance id; empty: none). Only passed on, in RemotePrefillTask::prefill_worker_id; it does not
  // change what the engine does (a prompt at or under max_local_prefill_tokens is still prefilled
  // here, against this engine's own prefix cache).
  std::string prefill_worker_id;
  // Prefill worker: when the request finishes, keep its KV blocks (RequestOutput::held_block_ids)
  // until ReleaseHeldBlocks, so they can be transferred.
  bool hold_blocks = false;
  // Prefill worker, layer-wise transfer: called on the engine thread during the step that computes
  // the prompt's last token, once per layer in order, when that layer's KV writes of the step are
  // issued (LayerKVReady::is_ready tells when they landed; block_ids = the request's block table,
  // valid during the call). Earlier steps' KV is complete by then. Not called when the step fails.
  // Keep it short: it runs inside the forward pass.
  std::function<void(const LayerKVReady&)> on_layer_kv_ready;
  // When the request reached the engine (AsyncEngine::Submit sets it when unset); only passed on,
  // in RemotePrefillTask::arrival, for the decode worker's timing log.
  std::chrono::steady_clock::time_point arrival{};
};

// A prompt whose KV must be written into this engine's blocks by a prefill worker.
struct RemotePrefillTask {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;
  std::vector<int> block_ids;   // the request's block table covering the whole prompt
  int num_cached_tokens = 0;    // leading prompt tokens whose KV this engine already has
                                // (a multiple of block_size): blocks from
                                // num_cached_tokens / block_size on must be written
  std::string prefill_worker_id;  // RequestOptions::prefill_worker_id (a hint; empty: none)
  std::chrono::steady_clock::time_point arrival{};  // RequestOptions::arrival
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* FinishReasonName(FinishReason reason);  // "stop", "length", "abort", "error"

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // the top-k alternatives, best first
};

// What one step produced for one request.
struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> new_token_ids;
  std::vector<TokenLogprob> new_logprobs;  // parallel to new_token_ids when logprobs >= 0
  std::string new_text;                    // detokenized, stop strings held back / cut
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;            // when finish_reason == kError
  // kError only: the worker serving the request died or went away mid-request (stream broken,
  // UNAVAILABLE, left discovery), not a refusal of its engine nor a deadline: the request may be
  // retried elsewhere (rpc/migrating_engine_client.h). Set by RemoteEngineClient.
  bool worker_lost = false;
  // kError only: the worker refused the request up front for a cause of the client's (INVALID_
  // ARGUMENT, OUT_OF_RANGE, UNIMPLEMENTED, NOT_FOUND) or of load (RESOURCE_EXHAUSTED), as its
  // engine's Submit would have said it: the code and the engine's own text, without the worker's
  // name or address (those stay in `error`). OK otherwise. Set by RemoteEngineClient; the
  // frontend answers it like a Submit error (400 / 404 / 503).
  Status refusal;
  int num_prompt_tokens = 0;
  int num_cached_tokens = 0;    // prompt tokens served from the prefix cache
  int num_output_tokens = 0;    // total so far
  // RequestOptions::hold_blocks: the finished request's block table, held until
  // Engine::ReleaseHeldBlocks.
  std::vector<int> held_block_ids;
};

struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;
  int num_kv_blocks_total = 0;
  int num_kv_blocks_used = 0;  // blocks referenced by live requests
  uint64_t prefix_cache_queries = 0;  // prompt tokens looked up
  uint64_t prefix_cache_hits = 0;     // of which served from the cache (the pool or a tier)
  // The host tier (EngineConfig::kv_offload_host_bytes; all 0 without one).
  int64_t kv_offload_host_blocks = 0;           // blocks held
  int64_t kv_offload_host_capacity_blocks = 0;
  uint64_t kv_offloaded_blocks = 0;   // copied out of the pool since start
  uint64_t kv_onboarded_blocks = 0;   // copied back into it
  uint64_t kv_offloaded_bytes = 0, kv_onboarded_bytes = 0;
  double kv_offload_seconds = 0, kv_onboard_seconds = 0;
  // The disk tier below it (EngineConfig::kv_offload_disk_*; all 0 without one).
  int64_t kv_offload_disk_blocks = 0;
  int64_t kv_offload_disk_capacity_blocks = 0;
  uint64_t kv_offload_disk_written_blocks = 0, kv_offload_disk_written_bytes = 0;
  uint64_t kv_offload_disk_read_blocks = 0, kv_offload_disk_read_bytes = 0;
  double kv_offload_disk_write_seconds = 0, kv_offload_disk_read_seconds = 0;
  uint64_t kv_offload_disk_write_errors = 0;  // writes that failed (a full disk, I/O errors)
  uint64_t kv_offload_disk_corrupt = 0;       // blocks that failed their check: dropped, recomputed
  uint64_t kv_offload_fetched_blocks = 0;     // disk -> host reads a waiting request used
};

class Engine {
 public:
  // tokenizer may be null (then no text, no stop strings).
  static Result<std::unique_ptr<Engine>> Create(std::unique_ptr<ModelRunner> runner,
                                                std::shared_ptr<const Tokenizer> tokenizer,
                                                const EngineConfig& config);
  virtual ~Engine() = default;

  // Queues a request. InvalidArgument: empty prompt, a token id outside the vocab, a prompt
  // longer than max_model_len (naming both lengths), max_tokens < 1, bad sampling values,
  // a duplicate request id, a prompt the whole KV pool cannot hold (it never could: not a
  // transient ResourceExhausted).
  virtual Status AddRequest(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                            const SamplingParams& params) = 0;
  // The same with disaggregation roles.
  virtual Status AddRequest(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                            const SamplingParams& params, const RequestOptions& options) = 0;

  // Decode side: the remote prefills that admissions since the last call asked for.
  virtual std::vector<RemotePrefillTask> TakeRemotePrefillTasks() = 0;
  // Decode side: the prefill worker wrote the task's blocks and sampled `first_token` (with its
  // logprobs when the request asked for them). The token goes through the usual stop checks; its
  // output comes with the next Step(). NotFound when the request is not awaiting remote KV.
  virtual Status CompleteRemotePrefill(const std::string& request_id, int32_t first_token,
                                       const std::vector<TokenLogprob>& logprobs) = 0;
  // Decode side: the remote prefill failed; the request is prefilled locally instead (its cached
  // prefix kept). NotFound when the request is not awaiting remote KV.
  virtual Status FailRemotePrefill(const std::string& request_id) = 0;
  // Prefill side: frees blocks held for a finished hold_blocks request. Unknown ids are ignored.
  virtual void ReleaseHeldBlocks(const std::string& request_id) = 0;

  // The checks AddRequest makes, without queuing (same errors). Reads only immutable
  // configuration: safe to call from any thread while another drives Step().
  virtual Status ValidateRequest(const std::vector<int32_t>& prompt_token_ids,
                                 const SamplingParams& params) const = 0;
  // Ends a request now (its blocks return to the pool); its next output says kAbort.
  virtual void AbortRequest(const std::string& request_id) = 0;
  // One scheduling step. Outputs only for requests that produced something or finished.
  virtual std::vector<RequestOutput> Step() = 0;
  virtual bool HasUnfinishedRequests() const = 0;
  virtual EngineStats Stats() const = 0;
  virtual const ModelConfig& model_config() const = 0;
  // The configuration in effect (defaults resolved: max_model_len is the model's when 0 was given).
  virtual const EngineConfig& config() const = 0;
  // Where the KV pool lives (model_runner.h): per-layer bases, bytes per block of one layer. The
  // addresses stay valid for the engine's lifetime; a transfer agent registers them.
  virtual KVCacheLayout kv_cache_layout() const = 0;

  // KV events for the router (kv_events.h). From the first call on, the prefix cache records them
  // and every Step() ends by handing `sink` the events since the previous step and the load, on
  // the thread calling Step() (the sink must not block). Null: batches are not handed out (events
  // keep being numbered, so a later sink sees the hole). No sink ever set: nothing is recorded.
  virtual void SetKvEventSink(std::shared_ptr<KvEventSink> sink) = 0;
  // Every cached block, consistent with the events up to snapshot.last_event_id (pending events
  // are handed to the sink first). Same thread as Step().
  virtual KvCacheSnapshot SnapshotCachedBlocks() = 0;

  // Attaches a timeline (model/step_timeline.h; null detaches): every Step() that runs a forward
  // pass adds its phases (schedule, batch, execute, post) and counts itself; the runner adds its
  // own (ModelRunner::SetStepTimeline). Same thread as Step(); the caller keeps it alive while
  // attached. For benchmarks (cuda_engine_bench --timeline); the default records nothing.
  virtual void SetStepTimeline(StepTimeline* timeline) {}
};

}  // namespace tandem
