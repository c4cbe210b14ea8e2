#include "worker/prefill_handler.h"

#include <algorithm>
#include <utility>

#include "common/logging.h"
#include "transfer/metadata.h"
#include "transfer/staging.h"
#ifdef TANDEM_HAVE_CUDA_COPIER
#include "transfer/cuda/cuda_copier.h"
#endif

namespace tandem::worker {

using runtime::RemotePrefillRequest;
using runtime::RemotePrefillResult;
using Clock = std::chrono::steady_clock;

struct PrefillHandler::Job {
  RemotePrefillRequest request;
  runtime::RemotePrefillDone done;
  Clock::time_point write_deadline;
  std::mutex mu;
  bool answered = false;  // guarded by mu
  // The engine holds the request's blocks for us (its final output came, not aborted); released
  // by Finish, or at once by OnEngineOutput when the job was already answered. Guarded by mu.
  bool blocks_held = false;
  // Set by the engine's final output (engine thread, before the job reaches ready_).
  RequestOutput final_output;
  int32_t first_token = -1;
  std::vector<TokenLogprob> logprobs;
  // Where the decode worker's pool lives (its agent metadata).
  transfer::MemoryKind remote_kind = transfer::MemoryKind::kHost;
  int32_t remote_device = 0;

  // Layer-wise: filled by the engine thread under `mu`, drained by the transfer thread.
  bool layerwise = false;           // the engine reported a layer (guarded by mu)
  bool computed = false;            // the final output arrived (guarded by mu)
  Status engine_status;             // not OK: the prefill failed (guarded by mu)
  std::vector<int> hook_blocks;     // the request's block table at the first report (guarded by mu)
  std::deque<LayerKVReady> reported;  // layers reported, not yet taken (guarded by mu)

  // Transfer thread only.
  bool in_active = false;
  transfer::TransferHandle handle;  // whole: the one write; layer-wise: the last layer's
  int num_blocks_written = 0;
  std::deque<LayerKVReady> layers;  // reported, not yet posted, in layer order
  std::vector<transfer::TransferHandle> layer_handles;  // posted layers but the last
  int next_layer = 0;
  bool last_posted = false;
  bool engine_cancelled = false;    // failed while computing: the engine request was cancelled
  Status failure;                   // set once: answer with it after every write has ended
  Clock::time_point first_post;
  // When the call arrived and when the engine's final output did (engine thread), for the log.
  Clock::time_point received, computed_at;
};

std::shared_ptr<transfer::DeviceCopier> KVDeviceCopier(const KVCacheLayout& layout) {
  if (layout.device_id < 0) return nullptr;
#ifdef TANDEM_HAVE_CUDA_COPIER
  return transfer::MakeCudaCopier();
#else
  return nullptr;  // built without CUDA: RegisterKVCache refuses the device pool, saying so
#endif
}

Result<std::string> KVTransferBackendLine(const transfer::Agent& agent, const KVCacheLayout& layout) {
  const transfer::MemoryKind kind =
      layout.device_id < 0 ? transfer::MemoryKind::kHost : transfer::MemoryKind::kDevice;
  TANDEM_ASSIGN_OR_RETURN(std::string described, agent.DescribeBackend(kind, std::max(layout.device_id, 0)));
  return "KV transfer backend: " + described;
}

Result<std::vector<transfer::Registration>> RegisterKVCache(transfer::Agent& agent,
                                                           const KVCacheLayout& layout) {
  std::vector<transfer::Registration> regs;
  const transfer::MemoryKind kind =
      layout.device_id < 0 ? transfer::MemoryKind::kHost : transfer::MemoryKind::kDevice;
  const int32_t device = layout.device_id < 0 ? 0 : layout.device_id;
  const uint64_t len = static_cast<uint64_t>(layout.block_bytes) * layout.num_blocks;
  for (void* base : layout.layer_base) {
    auto reg = agent.RegisterMemory(base, len, kind, device);
    if (!reg.ok()) {
      return Status(reg.status().code(), "registering the KV pool (" + transfer::MemoryName(kind, device) +
                                             ") with the transfer agent: " + reg.status().message());
    }
    regs.push_back(std::move(reg).value());
  }
  auto line = KVTransferBackendLine(agent, layout);
  if (line.ok()) {
    log::info("{}", *line);
  } else if (kind == transfer::MemoryKind::kDevice) {
    return line.status();  // e.g. --kv-transfer-backend ucx with the pool on the GPU
  } else {
    log::warn("KV transfer backend: none ({})", line.status().message());
  }
  return regs;
}

PrefillHandler::PrefillHandler(std::shared_ptr<AsyncEngine> engine, transfer::Agent* agent,
                               PrefillHandlerOptions options)
    : engine_(std::move(engine)),
      agent_(agent),
      options_(options),
      layout_(engine_->kv_cache_layout()),
      block_size_(engine_->engine_config().block_size) {
  transfer_ended_->owner = this;
  transfer_thread_ = std::thread([this] { TransferLoop(); });
}

PrefillHandler::~PrefillHandler() {
  std::vector<std::string> computing;
  {
    std::unique_lock<std::mutex> lock(mu_);
    computing.assign(outstanding_.begin(), outstanding_.end());
  }
  for (const std::string& id : computing) engine_->Cancel(id);
  {
    // Every job ends: aborted ones within an engine step, posted writes within their window.
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
    cv_.wait_for(lock, std::chrono::seconds(30), [&] { return outstanding_.empty(); });
  }
  cv_.notify_all();
  transfer_thread_.join();
  std::lock_guard<std::mutex> lock(transfer_ended_->mu);  // (every write ended by now)
  transfer_ended_->owner = nullptr;
}

void PrefillHandler::OnTransferEnded() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    transfer_ended_flag_ = true;
  }
  cv_.notify_all();
}

transfer::PostOptions PrefillHandler::PostOptionsFor(const Job& job, Clock::time_point now) const {
  transfer::PostOptions post;
  post.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(job.write_deadline - now);
  // The transfer thread wakes when a write ends rather than at its next poll.
  post.on_done = [signal = transfer_ended_] {
    std::lock_guard<std::mutex> lock(signal->mu);
    if (signal->owner) signal->owner->OnTransferEnded();
  };
  return post;
}

Result<std::pair<transfer::MemoryKind, int32_t>> KVPoolMemoryOf(std::string_view agent_metadata,
                                                                  uint64_t layer0_base) {
  TANDEM_ASSIGN_OR_RETURN(transfer::AgentMetadata md, transfer::DecodeMetadata(agent_metadata));
  for (const transfer::RegionMetadata& r : md.regions) {
    if (layer0_base >= r.addr && layer0_base - r.addr < r.len) return std::make_pair(r.kind, r.device_id);
  }
  return Err(StatusCode::kInvalidArgument, "agent {} registered no region at the KV pool's {:#x}", md.name,
             layer0_base);
}

Status PrefillHandler::EnsurePeer(const runtime::KVTarget& target) {
  std::lock_guard<std::mutex> lock(peers_mu_);
  auto it = peer_metadata_.find(target.agent_name);
  if (it != peer_metadata_.end() && it->second == target.agent_metadata) return Status::Ok();
  TANDEM_ASSIGN_OR_RETURN(std::string name, agent_->LoadPeerMetadata(target.agent_metadata));
  if (name != target.agent_name) {
    return Err(StatusCode::kInvalidArgument, "the agent metadata names '{}', the request '{}'",
               name, target.agent_name);
  }
  peer_metadata_[name] = target.agent_metadata;
  return Status::Ok();
}

void PrefillHandler::Prefill(RemotePrefillRequest request, runtime::RemotePrefillDone done) {
  const auto received = Clock::now();
  const runtime::KVTarget& t = request.target;
  const int num_prompt = static_cast<int>(request.prompt_token_ids.size());
  const int num_blocks = (num_prompt + block_size_ - 1) / block_size_;
  Status st;
  if (!t.kv_cache_dtype.empty() && t.kv_cache_dtype != layout_.dtype) {
    st = Err(StatusCode::kInvalidArgument,
             "KV cache dtype differs: the decode worker's is {}, this prefill worker's {} (start both "
             "with the same --kv-cache-dtype)", t.kv_cache_dtype, layout_.dtype);
  } else if (t.layer_base.size() != layout_.layer_base.size() || t.block_bytes != layout_.block_bytes ||
      t.block_size != block_size_) {
    st = Err(StatusCode::kInvalidArgument,
             "KV geometry differs: decode has {} layers, {} bytes and {} tokens per block; this "
             "prefill worker {}, {}, {}",
             t.layer_base.size(), t.block_bytes, t.block_size, layout_.layer_base.size(),
             layout_.block_bytes, block_size_);
  } else if (static_cast<int>(t.block_ids.size()) < num_blocks) {
    st = Err(StatusCode::kInvalidArgument, "the block table has {} blocks, the prompt needs {}",
             t.block_ids.size(), num_blocks);
  } else if (t.num_cached_tokens < 0 || t.num_cached_tokens % block_size_ != 0 ||
             t.num_cached_tokens >= num_prompt) {
    st = Err(StatusCode::kInvalidArgument,
             "num_cached_tokens {} must be a multiple of {} below the prompt length {}",
             t.num_cached_tokens, block_size_, num_prompt);
  } else if (request.write_window.count() <= 0) {
    st = Status(StatusCode::kInvalidArgument, "the write window must be positive");
  } else {
    st = EnsurePeer(t);
  }
  using PoolMemory = Result<std::pair<transfer::MemoryKind, int32_t>>;
  PoolMemory remote_memory =
      st.ok() ? KVPoolMemoryOf(t.agent_metadata, t.layer_base.empty() ? 0 : t.layer_base[0]) : PoolMemory(st);
  if (!remote_memory.ok()) {
    done(remote_memory.status());
    return;
  }

  auto job = std::make_shared<Job>();
  job->received = received;
  job->remote_kind = remote_memory->first;
  job->remote_device = remote_memory->second;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_ || !outstanding_.insert(request.request_id).second) {
      const bool stopping = stopping_;
      lock.unlock();
      done(stopping ? Status(StatusCode::kFailedPrecondition, "the prefill worker is stopping")
                    : Err(StatusCode::kFailedPrecondition, "request {} is already being prefilled",
                          request.request_id));
      return;
    }
  }
  job->write_deadline = Clock::now() + request.write_window;
  job->done = std::move(done);
  GenerateRequest gen;
  gen.request_id = request.request_id;
  gen.prompt_token_ids = request.prompt_token_ids;
  gen.params = request.params;
  gen.params.max_tokens = 1;
  gen.params.stop.clear();  // text does not matter here; the decode worker checks stops
  gen.options.hold_blocks = true;
  if (options_.layerwise) {
    gen.options.on_layer_kv_ready = [this, job](const LayerKVReady& ready) { OnLayerReady(job, ready); };
  }
  job->request = std::move(request);
  st = engine_->Submit(std::move(gen), [this, job](RequestOutput out) {
    if (out.finished) OnEngineOutput(job, std::move(out));
    else if (!out.new_token_ids.empty()) {  // not expected: the token comes with the final output
      job->first_token = out.new_token_ids.front();
      job->logprobs = out.new_logprobs;
    }
  });
  if (!st.ok()) Finish(job, st);
}

void PrefillHandler::Cancel(const std::string& request_id) {
  engine_->Cancel(request_id);  // a no-op once the engine finished it
}

void PrefillHandler::OnLayerReady(const std::shared_ptr<Job>& job, const LayerKVReady& ready) {
  // Engine thread, inside the step: only queue it.
  {
    std::lock_guard<std::mutex> lock(job->mu);
    if (!job->layerwise) {
      job->layerwise = true;
      job->hook_blocks.assign(ready.block_ids.begin(), ready.block_ids.end());
    }
    job->reported.push_back(LayerKVReady{ready.layer, ready.is_ready, {}});
  }
  {
    // Notified under the lock, here and below: once mu_ is free, the transfer thread may finish
    // the job and the destructor return, and cv_ would be notified after its destruction.
    std::lock_guard<std::mutex> lock(mu_);
    if (ready.layer == 0) ready_.push_back(job);  // the transfer thread drives it from now on
    cv_.notify_all();
  }
}

void PrefillHandler::OnEngineOutput(const std::shared_ptr<Job>& job, RequestOutput out) {
  // Engine thread: keep it short; the transfer thread does the rest.
  if (!out.new_token_ids.empty()) {
    job->first_token = out.new_token_ids.front();
    job->logprobs = out.new_logprobs;
  }
  job->computed_at = Clock::now();
  const bool held = !out.held_block_ids.empty();
  {
    std::lock_guard<std::mutex> lock(job->mu);
    if (job->answered) {
      // Answered already (e.g. stopping): nothing will transfer these, so nothing else frees them.
      if (held) engine_->ReleaseHeldBlocks(job->request.request_id);
    } else {
      job->blocks_held = held;
    }
  }
  const FinishReason reason = out.finish_reason;
  std::string error = out.error;
  job->final_output = std::move(out);
  Status st;
  if (reason == FinishReason::kAbort || reason == FinishReason::kError || job->first_token < 0) {
    st = Err(StatusCode::kFailedPrecondition, "the prefill was {}{}{}",
             reason == FinishReason::kAbort ? "cancelled" : "not completed", error.empty() ? "" : ": ", error);
  }
  bool layerwise;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    layerwise = job->layerwise;
    job->computed = true;
    job->engine_status = st;
  }
  if (!layerwise && !st.ok()) {  // nothing was posted: answer now
    Finish(job, st);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.push_back(job);
    cv_.notify_all();
  }
}

void PrefillHandler::Finish(const std::shared_ptr<Job>& job, Result<RemotePrefillResult> result) {
  runtime::RemotePrefillDone done;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    if (job->blocks_held) {
      engine_->ReleaseHeldBlocks(job->request.request_id);
      job->blocks_held = false;
    }
    if (job->answered) return;
    job->answered = true;
    done = std::move(job->done);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    outstanding_.erase(job->request.request_id);
    cv_.notify_all();  // under the lock: the destructor may return as soon as mu_ is free
  }
  if (!result.ok()) {
    log::info("[{}] remote prefill failed: {}", job->request.request_id, result.status().ToString());
  } else {
    // Where a disaggregated TTFT goes on this side: the call to the engine's final output (queueing
    // and the prefill), and from there to this answer (the writes still in flight, then ours).
    auto ms = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    const auto now = Clock::now();
    log::info("[{}] remote prefill answered: {} blocks, call to engine output {:.2f} ms, engine output to "
              "answer {:.2f} ms", job->request.request_id, result->num_blocks_written, ms(job->received, job->computed_at),
              ms(job->computed_at, now));
  }
  done(std::move(result));
}

void PrefillHandler::AddLayerDescs(const Job& job, size_t layer, const std::vector<int>& blocks,
                                   int first, int end, transfer::DescList* local,
                                   transfer::DescList* remote) const {
  // Our pool where our engine keeps it; the decode worker's where its metadata says.
  const runtime::KVTarget& t = job.request.target;
  local->kind = layout_.device_id < 0 ? transfer::MemoryKind::kHost : transfer::MemoryKind::kDevice;
  remote->kind = job.remote_kind;
  const int32_t device = layout_.device_id < 0 ? 0 : layout_.device_id;
  const uint64_t bb = layout_.block_bytes;
  const uint64_t src = reinterpret_cast<uint64_t>(layout_.layer_base[layer]);
  for (int i = first; i < end; ++i) {
    local->Add(src + static_cast<uint64_t>(blocks[i]) * bb, bb, device);
    remote->Add(t.layer_base[layer] + static_cast<uint64_t>(t.block_ids[i]) * bb, bb, job.remote_device);
  }
}

namespace {

// Blocks [first, end) of a prompt: from the decode worker's first uncached block to its last.
std::pair<int, int> BlockRange(const runtime::RemotePrefillRequest& r, int block_size) {
  const int num_prompt = static_cast<int>(r.prompt_token_ids.size());
  return {r.target.num_cached_tokens / block_size, (num_prompt + block_size - 1) / block_size};
}

}  // namespace

// The notification of a job's last write (runtime::KvReadyNotification): with the first token
// unless logprobs were asked for (they do not travel in it).
std::string PrefillHandler::KvReadyNotificationOf(const Job& job) {
  if (job.first_token < 0 || !job.logprobs.empty() || job.request.params.logprobs >= 0) {
    return job.request.request_id;
  }
  return runtime::KvReadyNotification(job.request.request_id, job.request.call_id, job.first_token);
}

// The answer of a job whose writes all landed.
RemotePrefillResult PrefillHandler::Written(const Job& job, int num_blocks, uint64_t bytes, double seconds) {
  RemotePrefillResult r;
  r.first_token_id = job.first_token;
  r.logprobs = job.logprobs;
  r.num_prefill_cached_tokens = job.final_output.num_cached_tokens;
  r.num_blocks_written = num_blocks;
  r.bytes_written = bytes;
  r.transfer_seconds = seconds;
  return r;
}

bool PrefillHandler::StepWholeJob(const std::shared_ptr<Job>& job) {
  if (job->handle.valid()) {
    const transfer::TransferState state = job->handle.Check();
    if (state == transfer::TransferState::kInProgress) return false;
    if (state == transfer::TransferState::kDone) {
      Finish(job, Written(*job, job->num_blocks_written, job->handle.bytes(), job->handle.seconds()));
    } else {
      Finish(job, Status(StatusCode::kFailedPrecondition, "KV write failed: " + job->handle.status().ToString()));
    }
    return true;
  }
  if (stopping_) {
    Finish(job, Status(StatusCode::kFailedPrecondition, "the prefill worker is stopping"));
    return true;
  }
  const std::vector<int>& held = job->final_output.held_block_ids;
  const auto [first, end] = BlockRange(job->request, block_size_);
  if (static_cast<int>(held.size()) < end) {
    Finish(job, Err(StatusCode::kInternal, "the engine held {} blocks, the prompt needs {}", held.size(), end));
    return true;
  }
  const auto now = Clock::now();
  if (now >= job->write_deadline) {
    Finish(job, Status(StatusCode::kFailedPrecondition,
                       "the write window closed before the KV was ready; nothing was written"));
    return true;
  }
  transfer::DescList local, remote;  // layer-major: runs of consecutive blocks coalesce
  for (size_t l = 0; l < layout_.layer_base.size(); ++l) AddLayerDescs(*job, l, held, first, end, &local, &remote);
  const transfer::PostOptions post = PostOptionsFor(*job, now);
  auto handle = agent_->Post(transfer::Op::kWrite, local, remote, job->request.target.agent_name,
                             KvReadyNotificationOf(*job), post);
  if (!handle.ok()) {
    Finish(job, handle.status());
    return true;
  }
  job->handle = std::move(*handle);
  job->num_blocks_written = end - first;
  return false;
}

bool PrefillHandler::StepLayerwiseJob(const std::shared_ptr<Job>& job) {
  const int num_layers = static_cast<int>(layout_.layer_base.size());
  bool computed;
  Status engine_status;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    while (!job->reported.empty()) {
      job->layers.push_back(std::move(job->reported.front()));
      job->reported.pop_front();
    }
    computed = job->computed;
    engine_status = job->engine_status;
  }
  const std::vector<int>& blocks = job->hook_blocks;  // written once, before the first report
  const auto [first, end] = BlockRange(job->request, block_size_);
  auto fail = [&](Status st) {
    if (job->failure.ok()) job->failure = std::move(st);
  };
  if (!engine_status.ok()) fail(engine_status);
  if (stopping_) fail(Status(StatusCode::kFailedPrecondition, "the prefill worker is stopping"));
  if (!job->last_posted && Clock::now() >= job->write_deadline) {
    fail(Status(StatusCode::kFailedPrecondition, "the write window closed before the KV was written"));
  }
  if (static_cast<int>(blocks.size()) < end) {
    fail(Err(StatusCode::kInternal, "the engine's block table has {} blocks, the prompt needs {}", blocks.size(), end));
  }
  // Post every layer whose KV has landed, in order; the last one waits for the rest.
  auto post_layer = [&](int layer, std::optional<std::string> notification) -> bool {
    const auto now = Clock::now();
    if (now >= job->write_deadline) {
      fail(Status(StatusCode::kFailedPrecondition, "the write window closed before the KV was written"));
      return false;
    }
    transfer::DescList local, remote;
    AddLayerDescs(*job, static_cast<size_t>(layer), blocks, first, end, &local, &remote);
    transfer::PostOptions post = PostOptionsFor(*job, now);
    post.while_computing = !computed;  // later layers still run: the copy engines, not the SMs
    auto handle = agent_->Post(transfer::Op::kWrite, local, remote, job->request.target.agent_name,
                               std::move(notification), post);
    if (!handle.ok()) {
      fail(handle.status());
      return false;
    }
    if (job->next_layer == 0 && !job->last_posted) job->first_post = now;
    ++num_layer_posts_;
    if (!computed) ++num_layer_posts_early_;
    (layer + 1 < num_layers ? job->layer_handles.emplace_back() : job->handle) = std::move(*handle);
    return true;
  };
  while (job->failure.ok() && job->next_layer < num_layers - 1 && !job->layers.empty() &&
         job->layers.front().is_ready()) {
    if (job->layers.front().layer != job->next_layer) {
      fail(Err(StatusCode::kInternal, "layer {} reported before layer {}", job->layers.front().layer, job->next_layer));
      break;
    }
    if (!post_layer(job->next_layer, std::nullopt)) break;
    job->layers.pop_front();
    ++job->next_layer;
  }
  bool in_flight = false;
  for (const transfer::TransferHandle& h : job->layer_handles) {
    const transfer::TransferState state = h.Check();
    if (state == transfer::TransferState::kInProgress) in_flight = true;
    else if (state == transfer::TransferState::kError) fail(Status(StatusCode::kFailedPrecondition, "KV write failed: " + h.status().ToString()));
  }
  if (job->handle.valid() && job->handle.Check() == transfer::TransferState::kInProgress) in_flight = true;
  if (!job->failure.ok()) {
    if (!computed) {
      // Failed while the prompt still computes (e.g. layer 0's write found the decode worker
      // dead): stop the engine, and answer only once its final output came, so that the blocks it
      // would hold after finishing are released (Finish) rather than held for nobody.
      if (!job->engine_cancelled) {
        job->engine_cancelled = true;
        engine_->Cancel(job->request.request_id);
      }
      return false;  // OnEngineOutput queues the job again
    }
    if (in_flight) return false;  // nothing may land after the answer
    Finish(job, job->failure);
    return true;
  }
  if (!computed || in_flight || job->next_layer < num_layers - 1) return false;
  if (!job->last_posted) {
    if (job->layers.empty() || !job->layers.front().is_ready()) return false;
    if (post_layer(num_layers - 1, KvReadyNotificationOf(*job))) {
      job->layers.pop_front();
      job->last_posted = true;
    }
    return false;  // the next turn sees it in flight, done or failed
  }
  // The last layer's write (with the notification) has ended, so has every other.
  if (job->handle.Check() == transfer::TransferState::kError) {
    Finish(job, Status(StatusCode::kFailedPrecondition, "KV write failed: " + job->handle.status().ToString()));
    return true;
  }
  uint64_t bytes = job->handle.bytes();
  for (const transfer::TransferHandle& h : job->layer_handles) bytes += h.bytes();
  Finish(job, Written(*job, end - first, bytes, std::chrono::duration<double>(Clock::now() - job->first_post).count()));
  return true;
}

void PrefillHandler::TransferLoop() {
  std::vector<std::shared_ptr<Job>> active;  // driven by this thread until answered
  for (;;) {
    std::deque<std::shared_ptr<Job>> woken;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Active jobs: also woken when one of their writes ends (OnTransferEnded); the poll is for
      // layers becoming ready and write deadlines.
      if (active.empty()) {
        cv_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
      } else {
        cv_.wait_for(lock, std::chrono::microseconds(100),
                     [&] { return stopping_ || !ready_.empty() || transfer_ended_flag_; });
      }
      transfer_ended_flag_ = false;
      woken.swap(ready_);
      if (stopping_ && woken.empty() && active.empty() && outstanding_.empty()) break;
    }
    for (std::shared_ptr<Job>& job : woken) {
      if (!job->in_active) {
        job->in_active = true;
        active.push_back(std::move(job));
      }
    }
    for (size_t i = 0; i < active.size();) {
      const std::shared_ptr<Job>& job = active[i];
      bool layerwise;
      {
        std::lock_guard<std::mutex> lock(job->mu);
        layerwise = job->layerwise;
      }
      if (layerwise ? StepLayerwiseJob(job) : StepWholeJob(job)) {
        active[i] = std::move(active.back());
        active.pop_back();
      } else {
        ++i;
      }
    }
  }
}

}  // namespace tandem::worker
