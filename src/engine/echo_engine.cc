#include "engine/echo_engine.h"

#include <vector>

namespace tandem {

struct EchoEngineClient::Active {
  GenerateRequest request;
  OutputCallback callback;
  std::unique_ptr<IncrementalDetokenizer> detokenizer;
  int num_output = 0;
  bool cancelled = false;
};

EchoEngineClient::EchoEngineClient(std::shared_ptr<const Tokenizer> tokenizer, ServedModelInfo info,
                                   std::chrono::microseconds token_delay)
    : tokenizer_(std::move(tokenizer)), info_(std::move(info)), token_delay_(token_delay) {
  thread_ = std::thread([this] { Loop(); });
}

EchoEngineClient::~EchoEngineClient() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Status EchoEngineClient::Submit(GenerateRequest request, OutputCallback on_output) {
  if (request.prompt_token_ids.empty()) {
    return Status(StatusCode::kInvalidArgument, "the prompt is empty");
  }
  if (info_.max_model_len > 0 &&
      static_cast<int>(request.prompt_token_ids.size()) > info_.max_model_len) {
    return Err(StatusCode::kInvalidArgument, "the prompt has {} tokens, more than max_model_len {}",
               request.prompt_token_ids.size(), info_.max_model_len);
  }
  auto active = std::make_shared<Active>();
  if (tokenizer_) {
    active->detokenizer = std::make_unique<IncrementalDetokenizer>(
        tokenizer_, request.params.skip_special_tokens);
  }
  active->callback = std::move(on_output);
  const std::string id = request.request_id;
  active->request = std::move(request);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status(StatusCode::kFailedPrecondition, "shutting down");
    if (!active_.emplace(id, std::move(active)).second) {
      return Err(StatusCode::kInvalidArgument, "duplicate request id '{}'", id);
    }
  }
  cv_.notify_one();
  return Status::Ok();
}

void EchoEngineClient::Cancel(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(request_id);
  if (it != active_.end()) it->second->cancelled = true;
  cv_.notify_one();
}

EngineClientStats EchoEngineClient::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineClientStats s;
  s.num_pending = static_cast<int>(active_.size());
  s.engine.num_running = s.num_pending;
  return s;
}

void EchoEngineClient::Loop() {
  for (;;) {
    std::vector<std::shared_ptr<Active>> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !active_.empty(); });
      if (stopping_) break;
      for (auto& [id, a] : active_) batch.push_back(a);
    }
    // One "step": one token for every active request.
    std::vector<std::string> done;
    for (auto& a : batch) {
      RequestOutput out;
      out.request_id = a->request.request_id;
      out.num_prompt_tokens = static_cast<int>(a->request.prompt_token_ids.size());
      bool cancelled;
      {
        std::lock_guard<std::mutex> lock(mu_);
        cancelled = a->cancelled;
      }
      if (cancelled) {
        out.finished = true;
        out.finish_reason = FinishReason::kAbort;
      } else {
        const auto& prompt = a->request.prompt_token_ids;
        const int32_t token = prompt[a->num_output % prompt.size()];
        ++a->num_output;
        out.new_token_ids.push_back(token);
        if (a->detokenizer) out.new_text = a->detokenizer->Push(token);
        if (a->num_output >= a->request.params.max_tokens) {
          if (a->detokenizer) out.new_text += a->detokenizer->Flush();
          out.finished = true;
          out.finish_reason = FinishReason::kLength;
        }
      }
      out.num_output_tokens = a->num_output;
      if (out.finished) done.push_back(out.request_id);
      a->callback(std::move(out));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const std::string& id : done) active_.erase(id);
    }
    if (token_delay_.count() > 0) std::this_thread::sleep_for(token_delay_);
  }
  std::unordered_map<std::string, std::shared_ptr<Active>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(active_);
  }
  for (auto& [id, a] : left) {
    RequestOutput out;
    out.request_id = id;
    out.finished = true;
    out.finish_reason = FinishReason::kAbort;
    out.num_output_tokens = a->num_output;
    a->callback(std::move(out));
  }
}

}  // namespace tandem
