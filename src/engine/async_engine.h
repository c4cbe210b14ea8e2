// AsyncEngine: an Engine driven by its own thread, as an EngineClient (thread-safe).
//
// Submit validates at once (Engine::ValidateRequest) and queues; the engine thread adds queued
// requests and cancellations between steps, runs Step() while there is work, and calls each
// request's OutputCallback on the engine thread. A cancelled request ends within one step.
//
// Disaggregated decode (AsyncEngineOptions::remote_prefill set): every request is added with
// allow_remote_prefill; after each step the engine's RemotePrefillTasks go to `remote_prefill`
// (which must not block) and its outcome, delivered from any thread, is applied on the engine
// thread: CompleteRemotePrefill, or FailRemotePrefill (local prefill; the outcome's error is
// logged). A request cancelled while its remote prefill is in flight is aborted only when the
// outcome arrives, so that a prefill worker still writing never writes into blocks that were
// given to another request; cancel_remote_prefill tells the prefill worker to stop meanwhile.
//
// KV events (AsyncEngineOptions::kv_event_sink set): the engine hands each step's events and load to
// the sink on the engine thread; SnapshotCachedBlocks asks the engine thread for a snapshot (for a
// router that lost events).
#pragma once

#include <functional>
#include <future>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "engine/engine.h"
#include "engine/engine_client.h"

namespace tandem {

// How a remote prefill ended (AsyncEngineOptions::remote_prefill).
struct RemotePrefillOutcome {
  Status status;                        // OK: the blocks were written and first_token sampled
  int32_t first_token = -1;
  std::vector<TokenLogprob> logprobs;   // the first token's, when the request asked for them
};

struct AsyncEngineOptions {
  std::string served_model_name;
  // Requests waiting for a running slot at most: Submit answers ResourceExhausted once the
  // unfinished requests reach the engine's max_num_seqs plus this (a burst fills the running
  // slots first, whatever the engine thread has admitted so far).
  int max_waiting_requests = 256;
  // Disaggregated decode: starts the remote prefill of `task` and calls `done` exactly once, from
  // any thread, when it ended. Unset: every prompt is prefilled here.
  std::function<void(RemotePrefillTask task, std::function<void(RemotePrefillOutcome)> done)>
      remote_prefill{};
  // Disaggregated decode: a request whose remote prefill is in flight was cancelled; ask the
  // prefill worker to stop (called once per request, on the engine thread; must not block). The
  // request still ends only when the outcome of `remote_prefill` arrives. Unset: the remote
  // prefill runs to its end.
  std::function<void(const std::string& request_id)> cancel_remote_prefill{};
  // KV events and load for a router (Engine::SetKvEventSink); OnStep must not block. Unset: none.
  std::shared_ptr<KvEventSink> kv_event_sink{};
};

class AsyncEngine final : public EngineClient {
 public:
  AsyncEngine(std::unique_ptr<Engine> engine, AsyncEngineOptions options);
  ~AsyncEngine() override;  // stops the thread; unfinished requests get a final kAbort output

  Status Submit(GenerateRequest request, OutputCallback on_output) override;
  void Cancel(const std::string& request_id) override;
  EngineClientStats Stats() const override;
  ServedModelInfo model_info() const override;

  // Prefill side: frees the blocks of a finished hold_blocks request (on the engine thread, before
  // its next step). Unknown ids are ignored.
  void ReleaseHeldBlocks(const std::string& request_id);
  // The engine's configuration (immutable).
  const EngineConfig& engine_config() const { return engine_->config(); }
  // The engine's KV pool (fixed for its lifetime).
  const KVCacheLayout& kv_cache_layout() const { return layout_; }
  // Engine::SnapshotCachedBlocks, taken on the engine thread between steps (any thread may call).
  // The result is FailedPrecondition when the engine stops first.
  std::future<Result<KvCacheSnapshot>> SnapshotCachedBlocks();

 private:
  void Loop();
  void DispatchRemotePrefills();  // engine thread
  void ApplyRemoteOutcome(const std::string& request_id, RemotePrefillOutcome outcome);
  struct RemoteInbox;  // outcomes of remote prefills; outlives this object while calls are out

  std::unique_ptr<Engine> engine_;
  AsyncEngineOptions options_;
  ServedModelInfo info_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::deque<GenerateRequest> inbox_;          // submitted, not yet added to the engine
  std::vector<std::string> cancels_;           // to abort before the next step
  std::unordered_map<std::string, OutputCallback> callbacks_;  // every unfinished request
  EngineStats last_stats_;                     // after the last step
  std::vector<std::string> releases_;          // held blocks to free before the next step
  std::vector<std::promise<Result<KvCacheSnapshot>>> snapshot_requests_;  // before the next step
  KVCacheLayout layout_;
  std::shared_ptr<RemoteInbox> remote_inbox_;
  // Engine thread only: remote prefills in flight, and which of them were cancelled meanwhile.
  std::unordered_map<std::string, bool> remote_in_flight_;
  std::thread thread_;
};

}  // namespace tandem
