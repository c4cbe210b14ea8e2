// RemoteEngineClient: the frontend's EngineClient over the request plane. Each request goes to one
// live worker of the components found in Discovery (round-robin, or the choice of
// RemoteEngineClientOptions::selector: the KV router, router/kv_routing.h), as one Worker.Generate
// stream (tandem.proto) with a deadline.
//
//   Submit   picks a worker and opens the stream; returns at once. No live worker: with
//            wait_for_worker > 0 the request waits for one (Submit returns OK; see "waiting"),
//            else FailedPrecondition ("no worker available ...", HTTP 503); InvalidArgument for a
//            request id already in flight.
//   waiting  a request that found no live worker is sent as soon as a Health poll finds one
//            (polls run every 100 ms meanwhile), its Generate deadline still request_timeout from
//            Submit; when none is live after wait_for_worker (or request_timeout, if shorter) its
//            one output is final kError with `refusal` FailedPrecondition "no worker available
//            ... (waited N s for one)" (IsNoWorkerOutput; the frontend answers it 503). Cancel
//            ends it with kAbort; so does the destructor. Refusals of the worker's engine (queue full, bad request) arrive
//            as the final output: kError with the worker's message.
//   outputs  delivered on gRPC's threads, in order, ending with exactly one finished output:
//            the worker's; kAbort after Cancel; kError with a message naming the worker when the
//            worker dies or goes away mid-stream (UNAVAILABLE; then RequestOutput::worker_lost is
//            set: retriable, see migrating_engine_client.h) or the deadline passes. Never a hang:
//            a dead connection fails at once, a silent one by keep-alive (~15 s) or the deadline.
//   lost worker  a Generate that fails with UNAVAILABLE (connection refused or reset; not a
//            Cancel) marks its worker unhealthy at once, before its final output is delivered:
//            new requests (round-robin and the selector's live list) skip it until a Health
//            poll that started after the failure succeeds, or discovery lists it under a new
//            endpoint (a new worker then).
//   Cancel   cancels the call (ClientContext::TryCancel); the worker cancels the engine request,
//            so its KV blocks return to the pool.
//   Stats    the sum of the workers' last Health answers (polled every refresh_interval) plus
//            num_pending = calls in flight from this client and requests waiting for a worker.
//   model_info  from the registration metadata of a worker ("model", "max_model_len",
//            "vocab_size"); the last one seen, or `fallback_model_info` before any.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "discovery/discovery.h"
#include "engine/engine_client.h"

namespace tandem::runtime {

// Chooses the worker of each request (e.g. the KV router). Called without the client's lock; must
// be thread-safe.
class WorkerSelector {
 public:
  virtual ~WorkerSelector() = default;
  // The refresh thread, after each discovery read: every worker discovery lists now for this
  // client (components and model filtered; healthy or not), sorted by instance id.
  virtual void SetWorkers(const std::vector<InstanceInfo>& workers) = 0;
  // Submit: the instance id of one of `live` (the healthy workers' ids, sorted) for `request`.
  // An error, or an id not in `live`, falls back to round-robin (and OnFinished is called).
  virtual Result<std::string> Select(const GenerateRequest& request,
                                     const std::vector<std::string>& live) = 0;
  // The request's first output arrived (its prompt is computed). On gRPC's threads.
  virtual void OnFirstOutput(const std::string& request_id) = 0;
  // The request ended (its final output, any way; also a Submit that failed after Select).
  virtual void OnFinished(const std::string& request_id) = 0;
  // The healthy workers' ids (sorted) whenever they change: after a Health poll, and at once when
  // a call finds its worker gone (see "lost worker"). Calls never overlap; the last one is the
  // current set. A selector should choose among these (Select's `live` is the same set then).
  virtual void SetLive(const std::vector<std::string>& live) { (void)live; }
};

struct RemoteEngineClientOptions {
  std::string namespace_name = "tandem";
  // Components whose workers serve requests (agg and decode workers both take Generate).
  std::vector<std::string> components = {kComponentAgg, kComponentDecode};
  // Non-empty: only workers whose metadata "model" equals it serve this client.
  std::string served_model_name;
  std::chrono::milliseconds request_timeout{std::chrono::hours(1)};  // each Generate's deadline
  std::chrono::milliseconds refresh_interval{500};  // discovery List and Health polls
  // How long a request that finds no live worker waits for one (see "waiting"); 0: it fails at
  // once. tandem frontend: --wait-for-worker-s (default 5 s).
  std::chrono::milliseconds wait_for_worker{0};
  ServedModelInfo fallback_model_info;              // model_info() before any worker was seen
  // Called on the refresh thread whenever the number of live workers changes (and once at start).
  std::function<void(int num_workers)> on_workers_changed;
  // Unset: round-robin over the healthy workers.
  std::shared_ptr<WorkerSelector> selector;
};

// One worker as this client sees it.
struct RemoteWorkerStatus {
  InstanceInfo instance;
  bool healthy = true;     // its last Health call succeeded (true before the first one) and no
                           // call found it gone (UNAVAILABLE) since that Health call started
  EngineClientStats stats;  // from its last successful Health call
};

// True for the final output of a request that waited wait_for_worker and found no live worker.
inline bool IsNoWorkerOutput(const RequestOutput& out) {
  return out.finished && out.finish_reason == FinishReason::kError &&
         out.refusal.code() == StatusCode::kFailedPrecondition;
}

class RemoteEngineClient final : public EngineClient {
 public:
  RemoteEngineClient(std::shared_ptr<Discovery> discovery, RemoteEngineClientOptions options);
  // Stops the refresh thread, ends waiting requests (kAbort), cancels every call in flight and
  // waits (up to 5 s) until each has delivered its final output (past that, the client's state is
  // leaked to the calls still running rather than freed under them). Not from a gRPC callback: the
  // channels it releases must not go on gRPC's threads (remote_engine_client_impl.h, CallEnded).
  ~RemoteEngineClient() override;

  Status Submit(GenerateRequest request, OutputCallback on_output) override;
  void Cancel(const std::string& request_id) override;
  EngineClientStats Stats() const override;
  ServedModelInfo model_info() const override;

  std::vector<RemoteWorkerStatus> Workers() const;
  // Re-reads discovery and polls Health now (the refresh thread does it every refresh_interval).
  void Refresh();

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace tandem::runtime
