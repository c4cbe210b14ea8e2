#include "engine/async_engine.h"

#include <algorithm>
#include <utility>

#include "common/logging.h"

namespace tandem {

AsyncEngine::AsyncEngine(std::unique_ptr<Engine> engine, AsyncEngineOptions options)
    : engine_(std::move(engine)), options_(std::move(options)) {
  info_.name = options_.served_model_name;
  info_.max_model_len = engine_->config().max_model_len;
  info_.vocab_size = engine_->model_config().vocab_size;
  last_stats_ = engine_->Stats();
  thread_ = std::thread([this] { Loop(); });
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Status AsyncEngine::Submit(GenerateRequest request, OutputCallback on_output) {
  // Validation reads only the engine's immutable configuration: safe beside a running Step().
  TANDEM_RETURN_IF_ERROR(engine_->ValidateRequest(request.prompt_token_ids, request.params));
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
    std::vector<std::string> cancels;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || engine_->HasUnfinishedRequests();
      });
      if (stopping_) break;
      added.swap(inbox_);
      cancels.swap(cancels_);
    }
    std::vector<RequestOutput> outputs;
    for (GenerateRequest& r : added) {
      Status st = engine_->AddRequest(r.request_id, std::move(r.prompt_token_ids), r.params);
      if (!st.ok()) {
        RequestOutput out;
        out.request_id = r.request_id;
        out.finished = true;
        out.finish_reason = FinishReason::kError;
        out.error = st.ToString();
        outputs.push_back(std::move(out));
      }
    }
    for (const std::string& id : cancels) engine_->AbortRequest(id);
    if (engine_->HasUnfinishedRequests()) {
      std::vector<RequestOutput> step = engine_->Step();
      for (RequestOutput& out : step) outputs.push_back(std::move(out));
    }
    // Callbacks run without the lock: they may call Submit/Cancel.
    std::vector<std::pair<OutputCallback*, RequestOutput>> deliveries;
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
          deliveries.emplace_back(&finished_callbacks.back(), std::move(out));
        } else {
          deliveries.emplace_back(&it->second, std::move(out));
        }
      }
    }
    // Pointers into callbacks_ stay valid: only this thread erases, and unordered_map keeps
    // element addresses across inserts.
    for (auto& [callback, out] : deliveries) (*callback)(std::move(out));
  }
  // Shutting down: every unfinished request ends with kAbort.
  std::unordered_map<std::string, OutputCallback> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(callbacks_);
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
