// The frontend's choice of a prefill worker for each request (DESIGN.md section 1: "frontend
// tokenizes -> router chooses (decode D, prefill P)"; issue 8).
//
// PrefillRouter: the prefill pool = the live instances of <namespace>/prefill in Discovery serving
// served_model_name (polled every refresh_interval).
//   selector  a WorkerSelector over that pool (remote_engine_client.h), normally a KvRouting
//             (kv_routing.h: a router::KvRouter fed by the prefill workers' KV events on the event
//             plane, in --router-mode, the same flag as for the decode pool); the pool's discovery
//             list goes to its SetWorkers on every change. Null: round-robin over the pool.
//   Choose    the chosen worker's instance id for a request, or "" when the pool is empty (the
//             request then carries no hint). A selector's error or a choice outside the pool falls
//             back to round-robin (its prediction freed: OnFinished).
//   OnFirstOutput / OnFinished  passed to the selector (its predicted load of the worker).
//
// PrefillRoutingEngineClient: the EngineClient the frontend serves with, over the one that sends
// requests to the decode workers (RemoteEngineClient, or a client wrapping it). Submit sets
// GenerateRequest::options.prefill_worker_id to Choose(...) unless the request already carries one;
// the request's first output and its final one (or a refused Submit) go to the PrefillRouter.
// The decode worker honours the hint when that worker is live in its own view of discovery and
// serves its model, else it picks round-robin (RemotePrefillClient). It still prefills locally
// what is short enough (--max-local-prefill-tokens, against its own prefix cache). Agg workers
// ignore the hint.
// Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "discovery/discovery.h"
#include "engine/engine_client.h"
#include "events/event_plane.h"
#include "router/kv_routing.h"
#include "rpc/remote_engine_client.h"

namespace tandem::runtime {

struct PrefillRouterOptions {
  std::string namespace_name = "tandem";
  std::string component = kComponentPrefill;
  std::string served_model_name;  // non-empty: only workers whose metadata "model" equals it
  std::shared_ptr<WorkerSelector> selector;  // null: round-robin
  std::string description = "round-robin";   // for the log line naming the pool's size
  std::chrono::milliseconds refresh_interval{500};
};

class PrefillRouter {
 public:
  PrefillRouter(std::shared_ptr<Discovery> discovery, PrefillRouterOptions options);
  ~PrefillRouter();  // stops watching discovery
  PrefillRouter(const PrefillRouter&) = delete;
  PrefillRouter& operator=(const PrefillRouter&) = delete;

  // "" when no prefill worker is live. `recorded` (required): the selector chose, holding a
  // prediction under request.request_id: the caller then calls OnFirstOutput (optional) and
  // OnFinished (exactly once) for it. An id chosen for and not yet finished is routed round-robin
  // (its prediction belongs to the request in flight).
  std::string Choose(const GenerateRequest& request, bool* recorded);
  void OnFirstOutput(const std::string& request_id);
  void OnFinished(const std::string& request_id);

  void Refresh();  // re-reads discovery now (the watch does it every refresh_interval)
  std::vector<std::string> workers() const;  // the pool's instance ids, sorted

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

class PrefillRoutingEngineClient final : public EngineClient {
 public:
  PrefillRoutingEngineClient(std::shared_ptr<EngineClient> inner,
                             std::shared_ptr<PrefillRouter> prefill_router);

  Status Submit(GenerateRequest request, OutputCallback on_output) override;
  void Cancel(const std::string& request_id) override { inner_->Cancel(request_id); }
  EngineClientStats Stats() const override { return inner_->Stats(); }
  ServedModelInfo model_info() const override { return inner_->model_info(); }

 private:
  std::shared_ptr<EngineClient> inner_;
  std::shared_ptr<PrefillRouter> router_;
};

// The frontend's set-up: a KvRouting (kv_routing.h) over the prefill pool with `routing`'s router
// config (the decode pool's --router-mode etc.; no metrics: the tandem_router_* series stay the
// decode pool's) attached to `feed` (kv_event_feed.h: the frontend's one KV event subscription,
// shared with the decode pool's router; the prefill workers publish their KV events there as every
// worker does; null: no events), a PrefillRouter over <routing.namespace_name>/prefill serving
// `served_model_name`, and the PrefillRoutingEngineClient over `inner`; `router_out` (optional)
// gets the PrefillRouter (e.g. for /health's pool sizes). Errors: KvRouting::Create's.
Result<std::shared_ptr<EngineClient>> WithPrefillRouting(std::shared_ptr<EngineClient> inner,
                                                         std::shared_ptr<Discovery> discovery,
                                                         std::shared_ptr<KvEventFeed> feed,
                                                         KvRoutingOptions routing,
                                                         const std::string& served_model_name,
                                                         std::shared_ptr<PrefillRouter>* router_out = nullptr);

}  // namespace tandem::runtime
