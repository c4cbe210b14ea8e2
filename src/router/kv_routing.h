// KvRouting: the frontend's KV-aware choice of worker (DESIGN.md section 4; issue 8). A
// WorkerSelector (remote_engine_client.h) over one router::KvRouter for the pool the frontend sends
// Generate to (agg | decode workers):
//
//   workers   SetWorkers (the client's discovery refresh) adds joining workers to the router and
//             removes departed ones (their blocks leave the index); each added worker is resynced
//             from its snapshot at once (it may have cached blocks from before this frontend).
//   events    a sink of a KvEventFeed (kv_event_feed.h: the frontend's one subscription to
//             KvEventsSubject(namespace), shared with its other router) holding the router's
//             workers; each batch (kv_event_codec.h): ApplyEvents, then UpdateLoad with the batch's
//             load. Events of a worker not (yet) in the router do not reach it (the resync after
//             it joins covers them).
//   resync    an EventGap of the plane or needs_snapshot from ApplyEvents queues the worker for a
//             snapshot: a thread (never the plane's) calls FetchSnapshot(endpoint, subject) and
//             ApplySnapshot; a failure is retried every retry_interval while the worker is known. A
//             gap with received < expected (the worker restarted under the same id) re-adds it.
//   choice    Select: RouteTokens(prompt, request id) among the router's routable workers
//             (KvRouter's mode, cost, temperature); a choice outside the client's live workers is
//             freed and refused (the client then goes round-robin). OnFirstOutput:
//             MarkPrefillDone; OnFinished: Free.
//   live      SetLive (the client's healthy workers, e.g. at once after a call found its worker
//             unreachable): the router's other workers are made unroutable (KvRouter::SetRoutable;
//             their blocks stay indexed) until a later SetLive lists them again. Before the first
//             SetLive, and for a worker that joins (or comes back under a new endpoint) after it,
//             every worker is routable.
//   block size  the router hashes prompts in blocks of the workers' metadata "block_size" (the
//             first worker seen; while the router has no worker it is rebuilt to match); a worker
//             with another block size is left out of the router (warned).
//
// Metrics (KvRoutingOptions::metrics, e.g. the frontend's /metrics):
//   tandem_router_decisions_total{mode}          decisions of the router, by mode
//   tandem_router_fallbacks_total                Select refused (no router worker / not live)
//   tandem_router_overlap_blocks                 histogram: cached prompt blocks on the chosen worker
//   tandem_router_overlap_ratio                  histogram: those over the prompt's full blocks
//   tandem_router_indexed_blocks                 gauge: blocks in the router's index (all workers)
//   tandem_router_worker_cached_blocks{worker}   gauge: per worker (0 once it left)
//   tandem_router_kv_events_total / tandem_router_snapshots_total / tandem_router_event_errors_total
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "events/event_plane.h"
#include "router/kv_event_feed.h"
#include "router/kv_router.h"
#include "rpc/remote_engine_client.h"

namespace tandem::runtime {

struct KvRoutingOptions {
  router::KvRouterConfig router;  // mode, overlap_weight, temperature; block_size: see above
  std::string namespace_name = "tandem";
  std::chrono::milliseconds snapshot_timeout{5000};
  std::chrono::milliseconds retry_interval{500};
  metrics::Registry* metrics = nullptr;  // null: no metrics
};

class KvRouting final : public WorkerSelector,
                        public KvEventSink,
                        public std::enable_shared_from_this<KvRouting> {
 public:
  // Attaches to `feed` (null: no events; the router then sees only its own predictions). Routers
  // of one frontend share one feed. InvalidArgument for a bad router config or a feed of another
  // namespace's subject.
  static Result<std::shared_ptr<KvRouting>> Create(std::shared_ptr<KvEventFeed> feed,
                                                   KvRoutingOptions options);
  // The same over a feed of its own on `plane` (null: no events). Also the plane's Subscribe
  // errors.
  static Result<std::shared_ptr<KvRouting>> Create(std::shared_ptr<EventPlane> plane,
                                                   KvRoutingOptions options);
  ~KvRouting() override;  // detaches from the feed, stops the resync thread

  void SetWorkers(const std::vector<InstanceInfo>& workers) override;
  Result<std::string> Select(const GenerateRequest& request,
                             const std::vector<std::string>& live) override;
  void OnFirstOutput(const std::string& request_id) override;
  void OnFinished(const std::string& request_id) override;
  void SetLive(const std::vector<std::string>& live) override;

  // KvEventSink (the feed's thread).
  bool HoldsWorker(const std::string& worker_id) const override;
  void OnKvEvents(const Event& event, const Result<KvEventBatch>& batch) override;
  void OnKvGap(const EventGap& gap) override;

  // e.g. "kv (overlap weight 1, temperature 0), KV events from embedded"
  std::string Describe() const;
  std::shared_ptr<router::KvRouter> router() const;  // the current one
  size_t num_indexed_blocks() const { return router()->num_indexed_blocks(); }

  struct Counters {
    uint64_t events_applied = 0;
    uint64_t snapshots_applied = 0;
    uint64_t errors = 0;  // undecodable payloads, failed snapshots
  };
  Counters counters() const;

  explicit KvRouting(KvRoutingOptions options);  // use Create

 private:
  void QueueResync(const std::string& worker_id);
  void ResyncLoop();
  void UpdateGauges();

  const KvRoutingOptions options_;
  const std::string subject_;
  std::shared_ptr<KvEventFeed> feed_;

  mutable std::mutex mu_;
  std::shared_ptr<router::KvRouter> router_;
  std::map<std::string, std::string> endpoints_;  // router workers: instance id -> endpoint
  std::set<std::string> ever_seen_;               // for the per-worker gauge
  std::set<std::string> wrong_block_size_;        // warned once
  std::set<std::string> down_;  // router workers the last SetLive left out (unroutable)
  Counters counters_;
  // Metric series (null without options.metrics).
  metrics::Counter* decisions_ = nullptr;  // {mode = the router's}
  metrics::Counter* fallbacks_ = nullptr;
  metrics::Counter* events_total_ = nullptr;
  metrics::Counter* snapshots_total_ = nullptr;
  metrics::Counter* errors_total_ = nullptr;
  metrics::Histogram* overlap_blocks_ = nullptr;
  metrics::Histogram* overlap_ratio_ = nullptr;

  std::mutex resync_mu_;
  std::condition_variable resync_cv_;
  std::deque<std::string> resync_queue_;
  std::set<std::string> resync_pending_;
  bool stop_ = false;
  std::thread resync_thread_;
};

}  // namespace tandem::runtime
