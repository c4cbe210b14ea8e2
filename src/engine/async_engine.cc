#include "engine/async_engine.h"

#include <algorithm>
#include <utility>

#include "common/logging.h"
#include "common/thread_name.h"

namespace tandem {

struct AsyncEngine::RemoteInbox {
  std::mutex mu;
  AsyncEngine* owner = nullptr;  // null once the engine thread stopped
  std::vector<std::pair<std::string, RemotePrefillOutcome>> outcomes;  // guarded by owner->mu_

  void Deliver(std::string request_id, RemotePrefillOutcome outcome) {
    std::lock_guard<std::mutex> lock(mu);
    if (!owner) return;
    {
      std::lock_guard<std::mutex> owner_lock(owner->mu_);
      outcomes.emplace_back(std::move(request_id), std::move(outcome));
    }
    owner->cv_.notify_one();
  }
};

AsyncEngine::AsyncEngine(std::unique_ptr<Engine> engine, AsyncEngineOptions options)
    : engine_(std::move(engine)), options_(std::move(options)) {
  info_.name = options_.served_model_name;
  info_.max_model_len = engine_->config().max_model_len;
  info_.vocab_size = engine_->model_config().vocab_size;
  last_stats_ = engine_->Stats();
  layout_ = engine_->kv_cache_layout();
  if (options_.kv_event_sink) engine_->SetKvEventSink(options_.kv_event_sink);
  remote_inbox_ = std::make_shared<RemoteInbox>();
  remote_inbox_->owner = this;
  thread_ = std::thread([this] {
    SetCurrentThreadName("tandem-engine");
    Loop();
  });
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  std::lock_guard<std::mutex> lock(remote_inbox_->mu);
  remote_inbox_->owner = nullptr;  // outcomes of calls still out are dropped
}

std::future<Result<KvCacheSnapshot>> AsyncEngine::SnapshotCachedBlocks() {
  std::promise<Result<KvCacheSnapshot>> promise;
  std::future<Result<KvCacheSnapshot>> future = promise.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      promise.set_value(Status(StatusCode::kFailedPrecondition, "the engine is shutting down"));
      return future;
    }
    snapshot_requests_.push_back(std::move(promise));
  }
  cv_.notify_one();
  return future;
}

void AsyncEngine::ReleaseHeldBlocks(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    releases_.push_back(request_id);
  }
  cv_.notify_one();
}

Status AsyncEngine::Submit(GenerateRequest request, OutputCallback on_output) {
  // Validation reads only the engine's immutable configuration: safe beside a running Step().
  TANDEM_RETURN_IF_ERROR(engine_->ValidateRequest(request.prompt_token_ids, request.params));
  if (request.options.arrival == std::chrono::steady_clock::time_point{}) {
    request.options.arrival = std::chrono::steady_clock::now();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status(StatusCode::kFailedPrecondition, "the engine is shutting down");
    if (callbacks_.count(request.request_id)) {
      return Err(StatusCode::kInvalidArgument, "duplicate request id '{}'", request.request_id);
    }
    const int num_unfinished = static_cast<int>(callbacks_.size());
    const int num_waiting = std::max(0, num_unfinished - engine_->config().max_num_seqs);
    if (num_waiting >= options_.max_waiting_requests) {
      return Err(StatusCode::kResourceExhausted,
                 "the server is busy: {} requests are waiting (limit {})", num_waiting,
                 options_.max_waiting_requests);
    }
    callbacks_.emplace(request.request_id, std::move(on_output));
    inbox_.push_back(std::move(request));
  }
  cv_.notify_one();
  return Status::Ok();
}

void AsyncEngine::Cancel(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!callbacks_.count(request_id)) return;
    cancels_.push_back(request_id);
  }
  cv_.notify_one();
}

EngineClientStats AsyncEngine::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineClientStats s;
  s.engine = last_stats_;
  s.num_pending = static_cast<int>(callbacks_.size());
  return s;
}

ServedModelInfo AsyncEngine::model_info() const { return info_; }

void AsyncEngine::Loop() {
  for (;;) {
    std::deque<GenerateRequest> added;
    std::vector<std::string> cancels, releases;
    std::vector<std::pair<std::string, RemotePrefillOutcome>> outcomes;
    std::vector<std::promise<Result<KvCacheSnapshot>>> snapshots;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || !releases_.empty() ||
               !remote_inbox_->outcomes.empty() || !snapshot_requests_.empty() ||
               engine_->HasUnfinishedRequests();
      });
      if (stopping_) break;
      added.swap(inbox_);
      cancels.swap(cancels_);
      releases.swap(releases_);
      outcomes.swap(remote_inbox_->outcomes);
      snapshots.swap(snapshot_requests_);
    }
    for (const std::string& id : releases) engine_->ReleaseHeldBlocks(id);
    for (auto& promise : snapshots) promise.set_value(engine_->SnapshotCachedBlocks());
    for (auto& [id, outcome] : outcomes) ApplyRemoteOutcome(id, std::move(outcome));
    std::vector<RequestOutput> outputs;
    for (GenerateRequest& r : added) {
      RequestOptions options = r.options;
      if (options_.remote_prefill) options.allow_remote_prefill = true;
      Status st = engine_->AddRequest(r.request_id, std::move(r.prompt_token_ids), r.params,
                                      options);
      if (!st.ok()) {
        RequestOutput out;
        out.request_id = r.request_id;
        out.finished = true;
        out.finish_reason = FinishReason::kError;
        out.error = st.ToString();
        outputs.push_back(std::move(out));
      }
    }
    for (const std::string& id : cancels) {
      auto it = remote_in_flight_.find(id);
      if (it == remote_in_flight_.end()) {
        engine_->AbortRequest(id);
      } else if (!it->second) {
        it->second = true;  // aborted when its outcome arrives
        if (options_.cancel_remote_prefill) options_.cancel_remote_prefill(id);
      }
    }
    if (engine_->HasUnfinishedRequests()) {
      std::vector<RequestOutput> step = engine_->Step();
      for (RequestOutput& out : step) outputs.push_back(std::move(out));
    }
    DispatchRemotePrefills();
    // Callbacks run without the lock: they may call Submit/Cancel. One request may have several
    // outputs here (a remote prefill's first token and an abort from the same iteration): each
    // delivery finds its callback through `targets`, which follows the callback out of
    // callbacks_ when the request's final output takes it (outputs after that one are dropped).
    std::vector<std::pair<std::string, RequestOutput>> deliveries;
    std::unordered_map<std::string, OutputCallback*> targets;
    std::vector<OutputCallback> finished_callbacks;
    finished_callbacks.reserve(outputs.size());  // no reallocation: pointers into it stay valid
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_stats_ = engine_->Stats();
      for (RequestOutput& out : outputs) {
        auto it = callbacks_.find(out.request_id);
        if (it == callbacks_.end()) continue;
        if (out.finished) {
          finished_callbacks.push_back(std::move(it->second));
          callbacks_.erase(it);
          targets[out.request_id] = &finished_callbacks.back();
        } else {
          targets.emplace(out.request_id, &it->second);
        }
        std::string id = out.request_id;
        deliveries.emplace_back(std::move(id), std::move(out));
      }
    }
    // Pointers into callbacks_ stay valid: only this thread erases (above, where `targets` is
    // updated), and unordered_map keeps element addresses across inserts.
    for (auto& [id, out] : deliveries) (*targets.at(id))(std::move(out));
  }
  // Shutting down: every unfinished request ends with kAbort (remote prefills still out are
  // dropped; the worker deregisters the KV pool before the engine frees it).
  std::unordered_map<std::string, OutputCallback> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(callbacks_);
    for (auto& promise : snapshot_requests_) {
      promise.set_value(Status(StatusCode::kFailedPrecondition, "the engine stopped"));
    }
    snapshot_requests_.clear();
  }
  for (auto& [id, callback] : left) {
    RequestOutput out;
    out.request_id = id;
    out.finished = true;
    out.finish_reason = FinishReason::kAbort;
    callback(std::move(out));
  }
}

}  // namespace tandem

namespace tandem {

void AsyncEngine::DispatchRemotePrefills() {
  std::vector<RemotePrefillTask> tasks = engine_->TakeRemotePrefillTasks();
  if (tasks.empty()) return;
  if (!options_.remote_prefill) {  // cannot happen: requests are added without the option
    for (const RemotePrefillTask& t : tasks) (void)engine_->FailRemotePrefill(t.request_id);
    return;
  }
  for (RemotePrefillTask& task : tasks) {
    remote_in_flight_[task.request_id] = false;
    std::string id = task.request_id;
    options_.remote_prefill(std::move(task),
                            [inbox = remote_inbox_, id](RemotePrefillOutcome outcome) {
                              inbox->Deliver(id, std::move(outcome));
                            });
  }
}

void AsyncEngine::ApplyRemoteOutcome(const std::string& request_id, RemotePrefillOutcome outcome) {
  auto it = remote_in_flight_.find(request_id);
  if (it == remote_in_flight_.end()) return;
  const bool cancelled = it->second;
  remote_in_flight_.erase(it);
  if (cancelled) {  // the prefill worker is done with the blocks: now they may go back
    engine_->AbortRequest(request_id);
    return;
  }
  if (outcome.status.ok()) {
    Status st = engine_->CompleteRemotePrefill(request_id, outcome.first_token, outcome.logprobs);
    if (st.ok()) return;
    outcome.status = st;
  }
  log::warn("[{}] remote prefill failed, prefilling locally: {}", request_id,
            outcome.status.ToString());
  (void)engine_->FailRemotePrefill(request_id);
}

}  // namespace tandem
