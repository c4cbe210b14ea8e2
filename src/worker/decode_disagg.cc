#include "worker/decode_disagg.h"

#include <fmt/format.h>

#include "common/logging.h"

namespace tandem::worker {

DecodeDisagg::DecodeDisagg(transfer::Agent* agent, KVCacheLayout layout, int block_size,
                           std::shared_ptr<runtime::RemotePrefillClient> client,
                           DecodeDisaggOptions options)
    : agent_(agent),
      layout_(std::move(layout)),
      block_size_(block_size),
      client_(std::move(client)),
      options_(options),
      metadata_(agent->ExportMetadata()) {}

void DecodeDisagg::Start(RemotePrefillTask task, std::function<void(RemotePrefillOutcome)> done) {
  runtime::RemotePrefillRequest req;
  req.request_id = task.request_id;
  req.prompt_token_ids = std::move(task.prompt_token_ids);
  req.params = task.params;
  req.target.agent_name = agent_->name();
  req.target.agent_metadata = metadata_;
  for (void* base : layout_.layer_base) req.target.layer_base.push_back(reinterpret_cast<uint64_t>(base));
  req.target.block_bytes = layout_.block_bytes;
  req.target.kv_cache_dtype = layout_.dtype;
  req.target.block_size = block_size_;
  req.target.block_ids = std::move(task.block_ids);
  req.target.num_cached_tokens = task.num_cached_tokens;
  req.write_window = options_.timeout - options_.write_margin;
  const uint64_t external_tokens = req.prompt_token_ids.size() - task.num_cached_tokens;
  const auto started = std::chrono::steady_clock::now();
  // From the request reaching the engine to this call (admission, block allocation, dispatch).
  const double queued_ms = task.arrival == std::chrono::steady_clock::time_point{}
                               ? 0.0
                               : std::chrono::duration<double, std::milli>(started - task.arrival).count();
  const std::string id = task.request_id;
  // The chosen prefill worker: Prefill fills it before it starts the call, so before `done` runs.
  auto worker = std::make_shared<std::string>();
  std::shared_ptr<runtime::RemotePrefillClient> client;
  {
    std::lock_guard<std::mutex> lock(mu_);
    client = client_;
  }
  if (!client) {
    num_fallbacks_.fetch_add(1);
    RemotePrefillOutcome stopping;
    stopping.status = Status(StatusCode::kFailedPrecondition, "the worker is stopping");
    done(std::move(stopping));
    return;
  }
  auto pending = std::make_shared<Pending>();
  pending->done = std::move(done);
  pending->call_id = req.call_id = next_call_id_.fetch_add(1) + 1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_[id] = pending;
  }
  client->Prefill(
      req, options_.timeout,
      [this, pending, external_tokens, started, queued_ms, id,
       worker](Result<runtime::RemotePrefillResult> result) {
        // The call ended: from now on nothing writes into the blocks. Its outcome, unless the
        // kv-ready notification was it.
        auto done = TakeDone(id, pending, /*erase=*/true);
        RemotePrefillOutcome outcome;
        if (!result.ok()) {
          if (!done) {  // the KV had arrived (the notification): decoding went on, from remote KV
            log::warn("[{}] remote prefill call failed after its KV arrived: {}", id, result.status().ToString());
            num_remote_.fetch_add(1);
            external_hit_tokens_.fetch_add(external_tokens);
            return;
          }
          outcome.status = result.status();
          bool cancelled;
          {
            std::lock_guard<std::mutex> lock(mu_);
            cancelled = pending->cancelled;
            if (!cancelled) stats_.num_errors += 1;
          }
          if (cancelled) {
            log::info("[{}] remote prefill stopped: the request was cancelled ({})", id,
                      result.status().ToString());
          } else {
            num_fallbacks_.fetch_add(1);
          }
          done(std::move(outcome));
          return;
        }
        outcome.first_token = result->first_token_id;
        outcome.logprobs = std::move(result->logprobs);
        num_remote_.fetch_add(1);
        external_hit_tokens_.fetch_add(external_tokens);
        const double ms = std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - started).count();
        log::info("[{}] remote prefill: {} blocks ({} bytes) written in {:.2f} ms, prefill "
                  "worker had {} prompt tokens cached, call took {:.1f} ms, {:.2f} ms after the request "
                  "reached the engine{} (prefill worker {})",
                  id, result->num_blocks_written, result->bytes_written,
                  result->transfer_seconds * 1e3, result->num_prefill_cached_tokens, ms, queued_ms,
                  done ? "" : "; decoding began at the kv-ready notification", *worker);
        {
          std::lock_guard<std::mutex> lock(mu_);
          stats_.num_transfers += 1;
          stats_.bytes += result->bytes_written;
          stats_.seconds += result->transfer_seconds;
        }
        if (done) done(std::move(outcome));
      },
      worker.get(), task.prefill_worker_id);
}

std::function<void(RemotePrefillOutcome)> DecodeDisagg::TakeDone(const std::string& request_id,
                                                                std::shared_ptr<Pending> p, bool erase) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(request_id);
  if (!p) {
    if (it == pending_.end()) return nullptr;
    p = it->second;
  }
  if (erase && it != pending_.end() && it->second == p) pending_.erase(it);
  if (p->answered) return nullptr;
  p->answered = true;
  return std::move(p->done);
}

void DecodeDisagg::OnNotification(const transfer::Notification& n) {
  const std::optional<runtime::KvReady> ready = runtime::ParseKvReadyNotification(n.message);
  if (!ready) return;
  // The call stays in flight (pending_ keeps it) until its answer: that ends the write window. A
  // notification of an earlier call of the same request id (late: its answer came first) is not
  // this call's.
  std::shared_ptr<Pending> p;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(ready->request_id);
    if (it == pending_.end() || it->second->call_id != ready->call_id) return;
    p = it->second;
  }
  auto done = TakeDone(ready->request_id, p, /*erase=*/false);
  if (!done) return;  // not ours, or already answered
  RemotePrefillOutcome outcome;
  outcome.first_token = ready->first_token;
  done(std::move(outcome));
}

void DecodeDisagg::Cancel(const std::string& request_id) {
  std::shared_ptr<runtime::RemotePrefillClient> client;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(request_id);
    if (it == pending_.end() || it->second->answered) return;
    it->second->cancelled = true;
    client = client_;
  }
  if (client) client->Cancel(request_id);
}

void DecodeDisagg::Shutdown() {
  std::shared_ptr<runtime::RemotePrefillClient> client;
  {
    std::lock_guard<std::mutex> lock(mu_);
    client.swap(client_);
  }
  client.reset();  // cancels and waits, unless a Start still holds it (then it does so there)
}

transfer::TransferStats DecodeDisagg::transfer_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::string FormatExternalHitRateLine(uint64_t external_hit_tokens, uint64_t queried_tokens) {
  const double pct = queried_tokens ? 100.0 * static_cast<double>(external_hit_tokens) /
                                          static_cast<double>(queried_tokens)
                                    : 0.0;
  return fmt::format("External prefix cache hit rate: {:.1f}%", pct);
}

}  // namespace tandem::worker
