#include "router/prefill_router.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <utility>

#include "common/logging.h"

namespace tandem::runtime {

struct PrefillRouter::Impl {
  std::shared_ptr<Discovery> discovery;
  PrefillRouterOptions options;
  std::mutex set_mu;  // one SetInstances at a time (the watch thread, Refresh's callers)
  mutable std::mutex mu;
  std::vector<std::string> workers;  // sorted instance ids
  bool counted = false;              // the pool's size was logged once
  size_t next = 0;                   // round-robin position
  std::set<std::string> routed;      // request ids holding a selector's prediction
  std::unique_ptr<Discovery::Watch> watch;

  void SetInstances(const std::vector<InstanceInfo>& instances) {
    std::vector<InstanceInfo> pool;
    for (const InstanceInfo& inst : instances) {
      if (!options.served_model_name.empty() &&
          inst.metadata.value("model", std::string()) != options.served_model_name) {
        continue;
      }
      pool.push_back(inst);
    }
    std::sort(pool.begin(), pool.end(),
              [](const auto& a, const auto& b) { return a.instance_id < b.instance_id; });
    std::vector<std::string> ids;
    for (const InstanceInfo& inst : pool) ids.push_back(inst.instance_id);
    // The selector outside `mu` (it may resync, fetch, log), one call at a time.
    std::lock_guard<std::mutex> serial(set_mu);
    if (options.selector) options.selector->SetWorkers(pool);
    std::lock_guard<std::mutex> lock(mu);
    if (ids != workers || !counted) {
      log::info("prefill router: {} prefill worker(s) in {}/{} ({})", ids.size(),
                options.namespace_name, options.component, options.description);
      counted = true;
    }
    workers = std::move(ids);
  }
};

PrefillRouter::PrefillRouter(std::shared_ptr<Discovery> discovery, PrefillRouterOptions options)
    : impl_(std::make_shared<Impl>()) {
  impl_->discovery = std::move(discovery);
  impl_->options = std::move(options);
  Refresh();
  std::weak_ptr<Impl> weak = impl_;
  impl_->watch = impl_->discovery->WatchComponent(
      impl_->options.namespace_name, impl_->options.component,
      [weak](const std::vector<InstanceInfo>& instances) {
        if (auto impl = weak.lock()) impl->SetInstances(instances);
      },
      impl_->options.refresh_interval);
}

PrefillRouter::~PrefillRouter() { impl_->watch.reset(); }

void PrefillRouter::Refresh() {
  auto listed = impl_->discovery->List(impl_->options.namespace_name, impl_->options.component);
  if (!listed.ok()) {
    log::warn("prefill router: {}", listed.status().ToString());
    return;
  }
  impl_->SetInstances(*listed);
}

std::vector<std::string> PrefillRouter::workers() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->workers;
}

std::string PrefillRouter::Choose(const GenerateRequest& request, bool* recorded) {
  *recorded = false;
  std::vector<std::string> live;
  bool in_flight = false;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->workers.empty()) return {};
    live = impl_->workers;
    in_flight = impl_->routed.count(request.request_id) > 0;
  }
  const auto& selector = impl_->options.selector;
  if (selector && !in_flight && !request.request_id.empty()) {
    Result<std::string> chosen = selector->Select(request, live);
    if (chosen.ok() && std::binary_search(live.begin(), live.end(), *chosen)) {
      std::lock_guard<std::mutex> lock(impl_->mu);
      impl_->routed.insert(request.request_id);
      *recorded = true;
      log::debug("[{}] prefill worker {} ({})", request.request_id, *chosen,
                 impl_->options.description);
      return std::move(chosen).value();
    }
    selector->OnFinished(request.request_id);
    log::debug("[{}] prefill router: {}: round-robin", request.request_id,
               chosen.ok() ? "chose " + *chosen + ", not in the pool" : chosen.status().ToString());
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->workers.empty()) return {};
  std::string worker = impl_->workers[impl_->next++ % impl_->workers.size()];
  log::debug("[{}] prefill worker {} (round-robin)", request.request_id, worker);
  return worker;
}

void PrefillRouter::OnFirstOutput(const std::string& request_id) {
  if (impl_->options.selector) impl_->options.selector->OnFirstOutput(request_id);
}

void PrefillRouter::OnFinished(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->routed.erase(request_id) == 0) return;
  }
  if (impl_->options.selector) impl_->options.selector->OnFinished(request_id);
}

PrefillRoutingEngineClient::PrefillRoutingEngineClient(std::shared_ptr<EngineClient> inner,
                                                       std::shared_ptr<PrefillRouter> prefill_router)
    : inner_(std::move(inner)), router_(std::move(prefill_router)) {}

Status PrefillRoutingEngineClient::Submit(GenerateRequest request, OutputCallback on_output) {
  if (!request.options.prefill_worker_id.empty()) {
    return inner_->Submit(std::move(request), std::move(on_output));
  }
  bool recorded = false;
  request.options.prefill_worker_id = router_->Choose(request, &recorded);
  if (!recorded) return inner_->Submit(std::move(request), std::move(on_output));
  const std::string id = request.request_id;
  auto first_seen = std::make_shared<std::atomic<bool>>(false);
  std::weak_ptr<PrefillRouter> weak = router_;
  OutputCallback wrapped = [on_output = std::move(on_output), weak, id,
                            first_seen](RequestOutput out) {
    if (auto r = weak.lock()) {
      if (!first_seen->exchange(true)) r->OnFirstOutput(id);
      if (out.finished) r->OnFinished(id);
    }
    on_output(std::move(out));
  };
  Status st = inner_->Submit(std::move(request), std::move(wrapped));
  if (!st.ok()) router_->OnFinished(id);  // a refused Submit has no callback
  return st;
}

Result<std::shared_ptr<EngineClient>> WithPrefillRouting(std::shared_ptr<EngineClient> inner,
                                                         std::shared_ptr<Discovery> discovery,
                                                         std::shared_ptr<KvEventFeed> feed,
                                                         KvRoutingOptions routing,
                                                         const std::string& served_model_name,
                                                         std::shared_ptr<PrefillRouter>* router_out) {
  routing.metrics = nullptr;
  auto selector = KvRouting::Create(std::move(feed), routing);
  if (!selector.ok()) return selector.status();
  PrefillRouterOptions options;
  options.namespace_name = routing.namespace_name;
  options.served_model_name = served_model_name;
  options.description = (*selector)->Describe();
  options.selector = *selector;
  auto router = std::make_shared<PrefillRouter>(std::move(discovery), std::move(options));
  if (router_out) *router_out = router;
  return std::shared_ptr<EngineClient>(
      std::make_shared<PrefillRoutingEngineClient>(std::move(inner), std::move(router)));
}

}  // namespace tandem::runtime
