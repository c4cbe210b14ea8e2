#include "router/kv_routing.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/logging.h"

namespace tandem::runtime {

Result<std::shared_ptr<KvRouting>> KvRouting::Create(std::shared_ptr<KvEventFeed> feed,
                                                     KvRoutingOptions options) {
  TANDEM_ASSIGN_OR_RETURN(auto probe, router::KvRouter::Create(options.router));
  (void)probe;
  if (feed && feed->subject() != KvEventsSubject(options.namespace_name)) {
    return Err(StatusCode::kInvalidArgument, "router of namespace '{}' on a feed of '{}'",
               options.namespace_name, feed->subject());
  }
  metrics::Registry* registry = options.metrics;
  auto self = std::make_shared<KvRouting>(std::move(options));
  if (registry) {
    std::weak_ptr<KvRouting> weak = self;
    registry->AddCollector([weak] {
      if (auto s = weak.lock()) s->UpdateGauges();
    });
  }
  self->feed_ = std::move(feed);
  if (self->feed_) self->feed_->Attach(self.get());
  return self;
}

Result<std::shared_ptr<KvRouting>> KvRouting::Create(std::shared_ptr<EventPlane> plane,
                                                     KvRoutingOptions options) {
  std::shared_ptr<KvEventFeed> feed;
  if (plane) {
    TANDEM_ASSIGN_OR_RETURN(feed, KvEventFeed::Create(std::move(plane), options.namespace_name));
  }
  return Create(std::move(feed), std::move(options));
}

KvRouting::KvRouting(KvRoutingOptions options)
    : options_(std::move(options)), subject_(KvEventsSubject(options_.namespace_name)),
      router_(std::make_shared<router::KvRouter>(options_.router)) {
  if (metrics::Registry* r = options_.metrics) {
    decisions_ = &r->GetCounter("tandem_router_decisions_total", "Worker choices of the router, by mode",
                                {{"mode", router::RouterModeName(options_.router.mode)}});
    fallbacks_ = &r->GetCounter("tandem_router_fallbacks_total",
                                "Requests the router did not place (round-robin instead)");
    events_total_ = &r->GetCounter("tandem_router_kv_events_total", "KV events applied by the router");
    snapshots_total_ = &r->GetCounter("tandem_router_snapshots_total",
                                      "Worker snapshots applied by the router (resyncs)");
    errors_total_ = &r->GetCounter("tandem_router_event_errors_total",
                                   "Undecodable KV event payloads and failed snapshot fetches");
    overlap_blocks_ = &r->GetHistogram(
        "tandem_router_overlap_blocks", "Prompt blocks already cached on the chosen worker",
        {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096});
    overlap_ratio_ = &r->GetHistogram(
        "tandem_router_overlap_ratio",
        "Cached prompt blocks on the chosen worker over the prompt's full blocks",
        {0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.99, 1});
  }
  resync_thread_ = std::thread([this] { ResyncLoop(); });
}

KvRouting::~KvRouting() {
  if (feed_) feed_->Detach(this);  // no handler call after this
  {
    std::lock_guard<std::mutex> lock(resync_mu_);
    stop_ = true;
  }
  resync_cv_.notify_all();
  if (resync_thread_.joinable()) resync_thread_.join();
}

std::shared_ptr<router::KvRouter> KvRouting::router() const {
  std::lock_guard<std::mutex> lock(mu_);
  return router_;
}

std::string KvRouting::Describe() const {
  const router::KvRouterConfig& c = options_.router;
  if (c.mode != router::RouterMode::kKv) {
    return fmt::format("{}, KV events from {}", router::RouterModeName(c.mode),
                       feed_ ? feed_->url() : "nowhere");
  }
  return fmt::format("kv (overlap weight {}, temperature {}), KV events from {}", c.overlap_weight,
                     c.temperature, feed_ ? feed_->url() : "nowhere");
}

KvRouting::Counters KvRouting::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void KvRouting::SetWorkers(const std::vector<InstanceInfo>& workers) {
  std::vector<std::string> added;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, std::string> now;
    for (const InstanceInfo& w : workers) {
      int block_size = options_.router.block_size;
      if (w.metadata.is_object() && w.metadata.contains("block_size") &&
          w.metadata["block_size"].is_number_integer()) {
        block_size = w.metadata["block_size"].get<int>();
      }
      if (block_size != router_->config().block_size) {
        if (router_->num_workers() == 0 && block_size >= 1) {
          router::KvRouterConfig config = router_->config();
          config.block_size = block_size;
          router_ = std::make_shared<router::KvRouter>(config);
          endpoints_.clear();
          down_.clear();
        } else {
          if (wrong_block_size_.insert(w.instance_id).second) {
            log::warn("router: worker {} has KV blocks of {} tokens, the router {}: left out",
                      w.instance_id, block_size, router_->config().block_size);
          }
          continue;
        }
      }
      now[w.instance_id] = w.endpoint;
    }
    for (const auto& [id, endpoint] : endpoints_) {
      auto it = now.find(id);
      if (it == now.end() || it->second != endpoint) {
        router_->RemoveWorker(id);
        down_.erase(id);  // back under a new endpoint: a new worker, routable
      }
    }
    for (const auto& [id, endpoint] : now) {
      auto it = endpoints_.find(id);
      if (it != endpoints_.end() && it->second == endpoint) continue;
      if (router_->AddWorker(id).ok()) {
        added.push_back(id);
        ever_seen_.insert(id);
      }
    }
    endpoints_ = std::move(now);
  }
  for (const std::string& id : added) QueueResync(id);
}

Result<std::string> KvRouting::Select(const GenerateRequest& request,
                                      const std::vector<std::string>& live) {
  std::shared_ptr<router::KvRouter> r = router();
  Result<router::RoutingDecision> d = r->RouteTokens(request.prompt_token_ids, request.request_id);
  if (d.ok() && !std::binary_search(live.begin(), live.end(), d->worker_id)) {
    r->Free(request.request_id);
    d = Err(StatusCode::kFailedPrecondition, "the router chose worker {}, which is not live",
            d->worker_id);
  }
  if (!d.ok()) {
    if (fallbacks_) fallbacks_->Inc();
    return d.status();
  }
  if (decisions_) {
    decisions_->Inc();
    overlap_blocks_->Observe(d->overlap_blocks);
    if (d->num_prompt_blocks > 0) {
      overlap_ratio_->Observe(static_cast<double>(d->overlap_blocks) / d->num_prompt_blocks);
    }
  }
  return std::move(d->worker_id);
}

void KvRouting::SetLive(const std::vector<std::string>& live) {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> down;
  for (const auto& [id, endpoint] : endpoints_) {
    const bool is_live = std::binary_search(live.begin(), live.end(), id);
    if (!is_live) down.insert(id);
    if (is_live != !down_.count(id)) {
      log::info("router: worker {} {} the choice", id, is_live ? "is back in" : "is out of");
    }
    (void)router_->SetRoutable(id, is_live);
  }
  down_ = std::move(down);
}

void KvRouting::OnFirstOutput(const std::string& request_id) { router()->MarkPrefillDone(request_id); }

void KvRouting::OnFinished(const std::string& request_id) { router()->Free(request_id); }

bool KvRouting::HoldsWorker(const std::string& worker_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return endpoints_.count(worker_id) > 0;
}

void KvRouting::OnKvEvents(const Event& event, const Result<KvEventBatch>& batch) {
  std::shared_ptr<router::KvRouter> r = router();
  if (!batch.ok()) {
    log::warn("router: KV events of worker {} (sequence {}): {}", event.worker_id, event.sequence,
              batch.status().ToString());
    if (errors_total_) errors_total_->Inc();
    {
      std::lock_guard<std::mutex> lock(mu_);
      counters_.errors++;
    }
    QueueResync(event.worker_id);
    return;
  }
  Result<router::ApplyEventsResult> applied = r->ApplyEvents(event.worker_id, batch->events);
  if (!applied.ok()) return;  // not (yet) a router worker: its resync after joining covers this
  (void)r->UpdateLoad(event.worker_id, batch->load);
  if (events_total_) events_total_->Inc(applied->num_applied);
  {
    std::lock_guard<std::mutex> lock(mu_);
    counters_.events_applied += applied->num_applied;
  }
  if (applied->needs_snapshot) QueueResync(event.worker_id);
}

void KvRouting::OnKvGap(const EventGap& gap) {
  if (gap.received < gap.expected) {  // the worker restarted under the same id: start over
    std::lock_guard<std::mutex> lock(mu_);
    if (endpoints_.count(gap.worker_id)) {
      router_->RemoveWorker(gap.worker_id);
      (void)router_->AddWorker(gap.worker_id);
      if (down_.count(gap.worker_id)) (void)router_->SetRoutable(gap.worker_id, false);
    }
  }
  QueueResync(gap.worker_id);
}

void KvRouting::QueueResync(const std::string& worker_id) {
  {
    std::lock_guard<std::mutex> lock(resync_mu_);
    if (!resync_pending_.insert(worker_id).second) return;
    resync_queue_.push_back(worker_id);
  }
  resync_cv_.notify_one();
}

void KvRouting::ResyncLoop() {
  // Failed snapshot fetches in a row, per worker (this thread only): the first is a warning, the
  // rest are debug lines until the worker answers again (an info line) or leaves.
  std::map<std::string, int> failures;
  std::unique_lock<std::mutex> lock(resync_mu_);
  for (;;) {
    resync_cv_.wait(lock, [this] { return stop_ || !resync_queue_.empty(); });
    if (stop_) return;
    const std::string id = resync_queue_.front();
    resync_queue_.pop_front();
    resync_pending_.erase(id);
    lock.unlock();

    std::string endpoint;
    std::shared_ptr<router::KvRouter> r;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (auto it = endpoints_.find(id); it != endpoints_.end()) endpoint = it->second;
      r = router_;
    }
    bool retry = false;
    if (endpoint.empty()) {
      failures.erase(id);  // it left: nothing to do
    } else {
      Status st;
      Result<EventSnapshot> snap = FetchSnapshot(endpoint, subject_, options_.snapshot_timeout);
      Result<KvCacheSnapshot> kv = snap.ok() ? DecodeKvCacheSnapshot(snap->payload)
                                             : Result<KvCacheSnapshot>(snap.status());
      if (kv.ok()) {
        if (auto f = failures.find(id); f != failures.end()) {
          log::info("router: snapshot of worker {} ({}) fetched after {} failed attempt(s)", id,
                    endpoint, f->second);
          failures.erase(f);
        }
        Result<router::ApplyEventsResult> applied = r->ApplySnapshot(id, *kv);
        if (applied.ok()) {
          if (!applied->stale_snapshot) (void)r->UpdateLoad(id, kv->load);
          if (snapshots_total_) snapshots_total_->Inc();
          std::lock_guard<std::mutex> l(mu_);
          counters_.snapshots_applied++;
          retry = applied->needs_snapshot;
        }
      } else {
        if (++failures[id] == 1) {
          log::warn("router: snapshot of worker {} ({}): {} (retrying every {} ms while it is in "
                    "discovery; further failures at debug level)",
                    id, endpoint, kv.status().ToString(), options_.retry_interval.count());
        } else {
          log::debug("router: snapshot of worker {} ({}), attempt {}: {}", id, endpoint,
                     failures[id], kv.status().ToString());
        }
        if (errors_total_) errors_total_->Inc();
        std::lock_guard<std::mutex> l(mu_);
        counters_.errors++;
        retry = true;
      }
    }
    lock.lock();
    if (retry && !stop_) {
      // Wait a little (woken early by stop), then queue it again.
      resync_cv_.wait_for(lock, options_.retry_interval, [this] { return stop_; });
      if (stop_) return;
      if (resync_pending_.insert(id).second) resync_queue_.push_back(id);
    }
  }
}

void KvRouting::UpdateGauges() {
  metrics::Registry* reg = options_.metrics;
  if (!reg) return;
  std::shared_ptr<router::KvRouter> r;
  std::set<std::string> seen;
  {
    std::lock_guard<std::mutex> lock(mu_);
    r = router_;
    seen = ever_seen_;
  }
  reg->GetGauge("tandem_router_indexed_blocks", "Blocks in the KV router's index (all workers)")
      .Set(static_cast<double>(r->num_indexed_blocks()));
  std::map<std::string, size_t> cached;
  for (const router::RouterWorkerState& w : r->Workers()) cached[w.worker_id] = w.num_cached_blocks;
  for (const std::string& id : seen) {
    auto it = cached.find(id);
    reg->GetGauge("tandem_router_worker_cached_blocks", "Blocks the KV router indexes, per worker",
                  {{"worker", id}})
        .Set(it == cached.end() ? 0.0 : static_cast<double>(it->second));
  }
}

}  // namespace tandem::runtime
