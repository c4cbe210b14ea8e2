// DecodeDisagg: a decode worker's side of disaggregated prefill (DESIGN.md section 1).
//
// Plugged into AsyncEngineOptions::remote_prefill. For each RemotePrefillTask of the engine (a
// prompt whose uncached part exceeds --max-local-prefill-tokens, with blocks already reserved),
// it asks a prefill worker (RemotePrefillClient) to write the blocks this worker lacks into them
// and to sample the first token. The call's deadline is `timeout`; the prefill worker's write
// window ends `write_margin` before it, so that once the call ended (answered, failed, or timed
// out) nothing writes into the blocks any more. Any failure (no prefill worker, worker died,
// geometry mismatch, transfer error, deadline) is an outcome with an error: the engine then
// prefills locally (AsyncEngine logs why).
//
// Which prefill worker: the frontend router's choice (DESIGN.md section 1: "router chooses
// (decode D, prefill P)") arrives as GenerateRequest.prefill_worker_id -> RequestOptions ->
// RemotePrefillTask::prefill_worker_id and is honoured when that worker is live in discovery and
// serves this model; else RemotePrefillClient picks round-robin (logged at debug level). Whether to
// go remote at all stays this worker's decision: conditional disaggregation compares the prompt's
// part missing from THIS worker's prefix cache with --max-local-prefill-tokens and prefills
// locally at or under it, whatever the hint.
//
// The blocks may be GPU memory (KVCacheLayout::device_id >= 0, registered as cuda:N with the
// agent's DeviceCopier: KVDeviceCopier, RegisterKVCache): the prefill worker learns that from the
// agent metadata sent here, and the tcp backend acknowledges a write only after its last staged
// chunk landed on the device, so the first decode step never reads KV still in flight.
//
// The first token may come before the call's answer: the prefill worker's last write carries a
// "kv-ready" notification (runtime::KvReadyNotification) with it and this call's call id, which
// the agent delivers after every byte of the request's KV landed. OnNotification takes it as the
// outcome of the call in flight with that request id and call id, so decoding starts one gRPC leg
// earlier (the answer, when it follows, only counts the transfer); a request whose logprobs were
// asked for waits for the answer. Exactly one outcome per task either way.
//
// Accounting (DESIGN.md section 4): each successful remote prefill counts as one KV transfer of
// the bytes the prefill worker reports; failures count as errors. External prefix cache hit rate =
// prompt tokens whose KV arrived from a prefill worker / prompt tokens looked up by this engine.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "engine/async_engine.h"
#include "rpc/remote_prefill_client.h"
#include "transfer/agent.h"
#include "transfer/transfer_stats.h"

namespace tandem::worker {

struct DecodeDisaggOptions {
  std::chrono::milliseconds timeout{120000};     // deadline of one RemotePrefill call
  std::chrono::milliseconds write_margin{5000};  // write window = timeout - write_margin
};

class DecodeDisagg {
 public:
  // `agent` must have `layout` registered (RegisterKVCache) and outlive this object.
  DecodeDisagg(transfer::Agent* agent, KVCacheLayout layout, int block_size,
               std::shared_ptr<runtime::RemotePrefillClient> client, DecodeDisaggOptions options);

  ~DecodeDisagg() { Shutdown(); }

  // AsyncEngineOptions::remote_prefill.
  void Start(RemotePrefillTask task, std::function<void(RemotePrefillOutcome)> done);
  // The agent's notifications (AgentOptions::on_notification, through a NotificationRelay): a
  // kv-ready one for a task in flight is its outcome; anything else is ignored.
  void OnNotification(const transfer::Notification& n);
  // AsyncEngineOptions::cancel_remote_prefill: the request's call in flight (if its outcome has
  // not come yet) asks its prefill worker to stop (RemotePrefillClient::Cancel). The outcome still
  // comes, from the call's answer; a failed one then counts as neither an error nor a fallback
  // (the request is aborted, not prefilled here). Does not block on the network.
  void Cancel(const std::string& request_id);
  // Cancels the calls in flight and waits for their outcomes (errors: local prefill); later
  // Starts fail at once. Call it before the agent's KV registrations go away.
  void Shutdown();

  transfer::TransferStats transfer_stats() const;
  uint64_t external_hit_tokens() const { return external_hit_tokens_.load(); }
  uint64_t num_remote_prefills() const { return num_remote_.load(); }
  uint64_t num_fallbacks() const { return num_fallbacks_.load(); }

 private:
  transfer::Agent* agent_;
  KVCacheLayout layout_;
  int block_size_;
  std::shared_ptr<runtime::RemotePrefillClient> client_;
  DecodeDisaggOptions options_;
  std::string metadata_;  // the agent's, exported once (the registrations do not change)

  // A task whose call is in flight; `done` runs once, from the notification or the answer.
  struct Pending {
    std::function<void(RemotePrefillOutcome)> done;
    uint64_t call_id = 0;   // RemotePrefillRequest::call_id, echoed in the kv-ready notification
    bool answered = false;  // done has run (guarded by mu_)
    bool cancelled = false;  // Cancel asked the prefill worker to stop (guarded by mu_)
  };
  // Takes `p`'s done (null `p`: the task in flight under `request_id`) if it has not run yet, and
  // marks it run; null otherwise. `erase`: `p`'s call ended, forget it.
  std::function<void(RemotePrefillOutcome)> TakeDone(const std::string& request_id, std::shared_ptr<Pending> p,
                                                     bool erase);

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Pending>> pending_;  // by request id, until the call ends
  std::atomic<uint64_t> next_call_id_{0};
  transfer::TransferStats stats_;
  std::atomic<uint64_t> external_hit_tokens_{0}, num_remote_{0}, num_fallbacks_{0};
};

// Routes an agent's notifications (AgentOptions::on_notification, fixed before the DecodeDisagg
// exists) to a DecodeDisagg once bound; until then, and after it is gone, they are dropped.
// Thread-safe.
class NotificationRelay {
 public:
  void Bind(std::weak_ptr<DecodeDisagg> target) {
    std::lock_guard<std::mutex> lock(mu_);
    target_ = std::move(target);
  }
  void operator()(const transfer::Notification& n) const {
    std::shared_ptr<DecodeDisagg> t;
    {
      std::lock_guard<std::mutex> lock(mu_);
      t = target_.lock();
    }
    if (t) t->OnNotification(n);
  }

 private:
  mutable std::mutex mu_;
  std::weak_ptr<DecodeDisagg> target_;
};

// "External prefix cache hit rate: P%" (P with 1 decimal; 0 when nothing was looked up), as
// vLLM's KV connector logs it.
std::string FormatExternalHitRateLine(uint64_t external_hit_tokens, uint64_t queried_tokens);

}  // namespace tandem::worker
