#include "rpc/migrating_engine_client.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/logging.h"
#include "common/metrics.h"
#include "rpc/remote_engine_client.h"

namespace tandem::runtime {
namespace {

// One caller request across its attempts. Fields guarded by mu.
struct RequestState {
  std::string id;              // the caller's
  GenerateRequest original;
  OutputCallback on_output;
  std::mutex mu;
  std::vector<int32_t> generated;  // every token streamed to the caller
  int num_prompt_tokens = 0;
  int num_cached_tokens = 0;   // the first attempt's
  int attempt = 0;             // 0: the original submission; k: the k-th migration
  std::string inner_id;        // the live (or last) attempt's id at the inner client
  bool cancelled = false;
  bool done = false;           // the final output was delivered
  std::optional<RequestOutput> lost;  // the live attempt replaces this lost one's (attempt > 0)
};

// A request whose worker was lost, waiting for its resubmission.
struct PendingRetry {
  std::shared_ptr<RequestState> state;
  RequestOutput lost;  // the lost attempt's final output (delivered if no retry happens)
};

}  // namespace

struct MigratingEngineClient::Impl {
  int limit = 0;
  std::function<void()> before_retry;
  metrics::Counter* counter = nullptr;
  EngineClient* inner = nullptr;  // valid while the thread runs
  std::atomic<uint64_t> migrations{0};

  std::mutex mu;
  std::condition_variable cv;
  std::deque<PendingRetry> pending;
  bool stop = false;
  std::unordered_map<std::string, std::shared_ptr<RequestState>> requests;
  std::thread thread;

  OutputCallback Callback(const std::shared_ptr<Impl>& self,
                          const std::shared_ptr<RequestState>& state) {
    return [self, state](RequestOutput out) { self->OnOutput(state, std::move(out)); };
  }

  void Erase(const RequestState& state) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = requests.find(state.id);
    if (it != requests.end() && it->second.get() == &state) requests.erase(it);
  }

  // Called with state.mu held: the output as the caller sees it.
  static void Rewrite(const RequestState& state, RequestOutput& out) {
    out.request_id = state.id;
    out.num_prompt_tokens = state.num_prompt_tokens;
    out.num_cached_tokens = state.num_cached_tokens;
    out.num_output_tokens = static_cast<int>(state.generated.size());
  }

  void OnOutput(const std::shared_ptr<RequestState>& state, RequestOutput out) {
    std::unique_lock<std::mutex> lock(state->mu);
    if (state->done) return;
    // The first attempt's (a synthesized error output carries 0).
    if (state->attempt == 0 && out.num_cached_tokens > 0) {
      state->num_cached_tokens = out.num_cached_tokens;
    }
    state->generated.insert(state->generated.end(), out.new_token_ids.begin(),
                            out.new_token_ids.end());
    Rewrite(*state, out);
    if (!out.finished) {
      lock.unlock();
      state->on_output(std::move(out));
      return;
    }
    if (state->attempt > 0 && state->lost && IsNoWorkerOutput(out)) {
      // The resubmission waited for a live worker in vain: the lost worker's error, as when the
      // resubmission is refused at once.
      log::warn("request {}: migration failed: {}", state->id, out.refusal.ToString());
      RequestOutput lost = std::move(*state->lost);
      lost.error += "; migration to another worker failed: " + out.refusal.message();
      Rewrite(*state, lost);
      state->done = true;
      lock.unlock();
      Erase(*state);
      state->on_output(std::move(lost));
      return;
    }
    const int remaining =
        state->original.params.max_tokens - static_cast<int>(state->generated.size());
    if (out.finish_reason == FinishReason::kError && out.worker_lost && !state->cancelled) {
      if (remaining <= 0) {
        // Every token was streamed; only the final output was lost.
        out.finish_reason = FinishReason::kLength;
        out.error.clear();
        out.worker_lost = false;
      } else if (state->attempt < limit) {
        std::unique_lock<std::mutex> impl_lock(mu);
        if (!stop) {
          // Tokens that came with the lost final output go out now, as a non-final output.
          RequestOutput partial;
          if (!out.new_token_ids.empty()) {
            partial = out;
            partial.finished = false;
            partial.finish_reason = FinishReason::kNone;
            partial.error.clear();
            partial.worker_lost = false;
            out.new_token_ids.clear();
            out.new_logprobs.clear();
            out.new_text.clear();
          }
          pending.push_back({state, std::move(out)});
          impl_lock.unlock();
          cv.notify_all();
          lock.unlock();
          if (!partial.new_token_ids.empty()) state->on_output(std::move(partial));
          return;
        }
        out.error += "; not migrated: the server is shutting down";
      } else if (limit > 0) {
        out.error += fmt::format("; not migrated: the request was already migrated {} time(s) "
                                 "(--migration-limit {})", state->attempt, limit);
      }
    }
    state->done = true;
    lock.unlock();
    Erase(*state);
    state->on_output(std::move(out));
  }

  // Delivers `out` as the final output unless one was delivered.
  void Finish(const std::shared_ptr<RequestState>& state, RequestOutput out) {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      if (state->done) return;
      state->done = true;
      Rewrite(*state, out);
    }
    Erase(*state);
    state->on_output(std::move(out));
  }

  void Retry(const std::shared_ptr<Impl>& self, PendingRetry retry) {
    const std::shared_ptr<RequestState>& state = retry.state;
    if (before_retry) before_retry();
    GenerateRequest request;
    std::string inner_id;
    {
      std::lock_guard<std::mutex> lock(state->mu);
      if (state->done) return;
      if (state->cancelled) {
        state->done = true;
        RequestOutput out;
        out.finished = true;
        out.finish_reason = FinishReason::kAbort;
        Rewrite(*state, out);
        // Delivered below, outside the lock.
        retry.lost = std::move(out);
      } else {
        ++state->attempt;
        request = state->original;
        request.prompt_token_ids.insert(request.prompt_token_ids.end(), state->generated.begin(),
                                        state->generated.end());
        request.params.max_tokens -= static_cast<int>(state->generated.size());
        // A structured output resumes its grammar after the tokens generated so far.
        if (request.params.structured.kind != grammar::StructuredKind::kNone) {
          request.params.structured_prefix_tokens += static_cast<int>(state->generated.size());
        }
        request.request_id = fmt::format("{}#m{}", state->id, state->attempt);
        state->inner_id = request.request_id;
        inner_id = request.request_id;
        log::warn("migrating request {} after {} tokens (attempt {} of {}): {}", state->id,
                  state->generated.size(), state->attempt, limit, retry.lost.error);
      }
    }
    if (inner_id.empty()) {  // cancelled while waiting
      Erase(*state);
      state->on_output(std::move(retry.lost));
      return;
    }
    Status st;
    {
      // Counted before the new attempt's outputs reach the caller (OnOutput takes state->mu; the
      // inner client never calls back on the submitting thread, engine_client.h).
      std::lock_guard<std::mutex> lock(state->mu);
      state->lost = retry.lost;
      st = inner->Submit(std::move(request), Callback(self, state));
      if (st.ok()) {
        migrations.fetch_add(1);
        if (counter) counter->Inc();
      }
    }
    if (!st.ok()) {
      log::warn("request {}: migration failed: {}", state->id, st.ToString());
      retry.lost.error += "; migration to another worker failed: " + st.message();
      Finish(state, std::move(retry.lost));
      return;
    }
    bool cancel = false;
    {
      std::lock_guard<std::mutex> lock(state->mu);
      cancel = state->cancelled && !state->done;
    }
    if (cancel) inner->Cancel(inner_id);  // Cancel came while Submit ran
  }

  void Run(const std::shared_ptr<Impl>& self) {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [this] { return stop || !pending.empty(); });
      if (pending.empty()) return;  // stop
      PendingRetry retry = std::move(pending.front());
      pending.pop_front();
      const bool stopping = stop;
      lock.unlock();
      if (stopping) {
        retry.lost.error += "; not migrated: the server is shutting down";
        Finish(retry.state, std::move(retry.lost));
      } else {
        Retry(self, std::move(retry));
      }
      lock.lock();
    }
  }
};

MigratingEngineClient::MigratingEngineClient(std::shared_ptr<EngineClient> inner,
                                             MigratingEngineClientOptions options)
    : inner_(std::move(inner)), impl_(std::make_shared<Impl>()) {
  impl_->limit = options.migration_limit < 0 ? 0 : options.migration_limit;
  impl_->before_retry = std::move(options.before_retry);
  impl_->inner = inner_.get();
  if (options.registry) {
    impl_->counter = &options.registry->GetCounter(
        "tandem_request_migrations_total",
        "Requests resubmitted to another worker after theirs was lost mid-stream");
  }
  Impl* impl = impl_.get();
  std::weak_ptr<Impl> weak = impl_;
  impl_->thread = std::thread([impl, weak] {
    // The thread is joined before impl_ is dropped by its owner: the lock always succeeds.
    std::shared_ptr<Impl> self = weak.lock();
    impl->Run(self);
  });
}

MigratingEngineClient::~MigratingEngineClient() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->thread.join();
}

Status MigratingEngineClient::Submit(GenerateRequest request, OutputCallback on_output) {
  auto state = std::make_shared<RequestState>();
  state->id = request.request_id;
  state->original = request;
  state->on_output = std::move(on_output);
  state->num_prompt_tokens = static_cast<int>(request.prompt_token_ids.size());
  state->inner_id = request.request_id;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!impl_->requests.emplace(state->id, state).second) {
      return Err(StatusCode::kInvalidArgument, "duplicate request id '{}'", state->id);
    }
  }
  Status st = inner_->Submit(std::move(request), impl_->Callback(impl_, state));
  if (!st.ok()) impl_->Erase(*state);
  return st;
}

void MigratingEngineClient::Cancel(const std::string& request_id) {
  std::shared_ptr<RequestState> state;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->requests.find(request_id);
    if (it == impl_->requests.end()) return;
    state = it->second;
  }
  std::string inner_id;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->done) return;
    state->cancelled = true;
    inner_id = state->inner_id;
  }
  // A request waiting for its resubmission sees `cancelled` on the migration thread; a live
  // attempt is cancelled here (an id the inner client no longer knows is ignored).
  inner_->Cancel(inner_id);
}

EngineClientStats MigratingEngineClient::Stats() const { return inner_->Stats(); }

ServedModelInfo MigratingEngineClient::model_info() const { return inner_->model_info(); }

uint64_t MigratingEngineClient::num_migrations() const { return impl_->migrations.load(); }

}  // namespace tandem::runtime
