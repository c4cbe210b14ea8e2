#include "rpc/remote_engine_client.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include <fmt/ranges.h>
#include <grpcpp/grpcpp.h>

#include "common/logging.h"
#include "common/tsan.h"
#include "rpc/proto_convert.h"
#include "rpc/remote_engine_client_impl.h"
#include "rpc/tandem.grpc.pb.h"
#include "rpc/worker_channel.h"

namespace tandem::runtime {
namespace {

using remote_detail::CallEntry;
using remote_detail::SteadyClock;
using remote_detail::Worker;

std::shared_ptr<Worker> Connect(const InstanceInfo& instance) {
  auto w = std::make_shared<Worker>();
  w->instance = instance;
  w->channel = CreateWorkerChannel(instance.endpoint);
  w->stub = v1::Worker::NewStub(w->channel);
  return w;
}

ServedModelInfo InfoFromMetadata(const InstanceInfo& instance) {
  ServedModelInfo info;
  const nlohmann::json& m = instance.metadata;
  if (!m.is_object()) return info;
  info.name = m.value("model", std::string());
  info.max_model_len = m.value("max_model_len", 0);
  info.vocab_size = m.value("vocab_size", 0);
  return info;
}

}  // namespace


namespace {

class GenerateCall final : public grpc::ClientReadReactor<v1::GenerateOutput> {
 public:
  GenerateCall(RemoteEngineClient::Impl* owner, std::shared_ptr<Worker> worker,
               std::shared_ptr<CallEntry> entry, const GenerateRequest& request,
               OutputCallback on_output, SteadyClock::time_point deadline)
      : owner_(owner), worker_(std::move(worker)), entry_(std::move(entry)),
        request_id_(request.request_id), on_output_(std::move(on_output)),
        timeout_(owner_->options.request_timeout), selector_(owner_->options.selector) {
    ToProto(request, &request_);
    entry_->context->set_deadline(std::chrono::system_clock::now() + (deadline - SteadyClock::now()));
  }

  // gRPC's callbacks come on its threads: each acquires what the thread before it released
  // (common/tsan.h; gRPC's own ordering is invisible to TSan).
  void Start() {
    tsan::Release(this);
    worker_->stub->async()->Generate(entry_->context.get(), &request_, this);
    StartRead(&response_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    tsan::Acquire(this);
    if (!ok) {  // OnDone follows with the status
      tsan::Release(this);
      return;
    }
    RequestOutput out = FromProto(response_);
    out.request_id = request_id_;
    if (selector_ && !first_output_seen_) selector_->OnFirstOutput(request_id_);
    first_output_seen_ = true;
    if (out.finished) {
      final_delivered_ = true;
      if (selector_) selector_->OnFinished(request_id_);
      owner_->CallDone(request_id_, entry_.get());
    }
    on_output_(std::move(out));
    tsan::Release(this);
    if (!final_delivered_) StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    tsan::Acquire(this);
    if (!final_delivered_) {
      if (selector_) selector_->OnFinished(request_id_);
      owner_->CallDone(request_id_, entry_.get());
      RequestOutput out;
      out.request_id = request_id_;
      out.finished = true;
      if (entry_->cancelled.load()) {
        out.finish_reason = FinishReason::kAbort;
      } else {
        out.finish_reason = FinishReason::kError;
        out.error = ErrorMessage(status);
        // The worker died or went away (not its engine's refusal, not the deadline): retriable.
        out.worker_lost = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                          status.error_code() == grpc::StatusCode::CANCELLED;
        switch (status.error_code()) {
          case grpc::StatusCode::INVALID_ARGUMENT:
          case grpc::StatusCode::OUT_OF_RANGE:
          case grpc::StatusCode::UNIMPLEMENTED:
          case grpc::StatusCode::NOT_FOUND:
          case grpc::StatusCode::RESOURCE_EXHAUSTED:
            out.refusal = FromGrpcStatus(status);
            break;
          default:
            break;
        }
        if (out.refusal.ok()) {
          log::warn("[{}] {}", request_id_, out.error);
        } else {
          log::info("[{}] {}", request_id_, out.error);  // the client's request, not a fault
        }
        // Before the final output: a retry (migration) or the next request must not pick it.
        if (status.error_code() == grpc::StatusCode::UNAVAILABLE) owner_->MarkLost(worker_);
      }
      on_output_(std::move(out));
    }
    // Nothing that may hold the last reference to a channel or to the Impl is dropped on this
    // thread (Impl::CallEnded): the worker and the entry go to the Impl, which outlives this call.
    RemoteEngineClient::Impl* owner = owner_;
    std::shared_ptr<Worker> worker = std::move(worker_);
    std::shared_ptr<CallEntry> entry = std::move(entry_);
    delete this;  // the caller's callback (and what it holds) goes before the client may
    owner->CallEnded(std::move(worker), std::move(entry));  // the client may be gone after this
    if (auto hook = remote_detail::after_call_ended_for_testing.load()) hook();
  }

 private:
  std::string ErrorMessage(const grpc::Status& status) const {
    const std::string code = GrpcCodeName(status.error_code());
    switch (status.error_code()) {
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        return fmt::format("the request exceeded its deadline of {} s on worker {}",
                           std::chrono::duration<double>(timeout_).count(), worker_->Name());
      case grpc::StatusCode::UNAVAILABLE:
      case grpc::StatusCode::CANCELLED:
        return fmt::format("worker {} went away during the request ({}: {})", worker_->Name(),
                           code, status.error_message());
      case grpc::StatusCode::OK:
        return fmt::format("worker {} ended the stream without a final output", worker_->Name());
      default:
        return fmt::format("worker {} failed the request ({}: {})", worker_->Name(), code,
                           status.error_message());
    }
  }

  RemoteEngineClient::Impl* const owner_;  // outlives the call (Impl::CallEnded)
  std::shared_ptr<Worker> worker_;
  std::shared_ptr<CallEntry> entry_;
  std::string request_id_;
  OutputCallback on_output_;
  std::chrono::milliseconds timeout_;
  v1::GenerateRequest request_;
  v1::GenerateOutput response_;
  std::shared_ptr<WorkerSelector> selector_;
  bool first_output_seen_ = false;
  bool final_delivered_ = false;
};

}  // namespace

void remote_detail::StartGenerateCall(RemoteEngineClient::Impl* owner,
                                      std::shared_ptr<Worker> worker, std::shared_ptr<CallEntry> entry,
                                      const GenerateRequest& request, OutputCallback on_output,
                                      SteadyClock::time_point deadline) {
  auto* call = new GenerateCall(owner, std::move(worker), std::move(entry), request,
                                std::move(on_output), deadline);
  call->Start();  // deletes itself in OnDone
}

void RemoteEngineClient::Impl::Refresh() {
  std::lock_guard<std::mutex> serial(refresh_serial);
  // Ended calls' workers and entries (Impl::CallEnded), dropped here, outside any gRPC callback;
  // an entry Cancel still holds (its copy would drop the last reference) waits for the next one.
  std::vector<RetiredCall> released;
  {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<RetiredCall> kept;
    for (RetiredCall& r : retired) (r.entry.use_count() > 1 ? kept : released).push_back(std::move(r));
    retired.swap(kept);
  }
  Result<std::vector<InstanceInfo>> listed = std::vector<InstanceInfo>{};
  for (const std::string& component : options.components) {
    auto part = discovery->List(options.namespace_name, component);
    if (!part.ok()) {
      log::warn("remote engine client: {}", part.status().ToString());
      return;
    }
    listed->insert(listed->end(), part->begin(), part->end());
  }
  std::vector<std::shared_ptr<Worker>> current;
  {
    std::lock_guard<std::mutex> lock(mu);
    current = workers;
  }
  std::vector<std::shared_ptr<Worker>> fresh;
  for (const InstanceInfo& instance : *listed) {
    if (!options.served_model_name.empty() &&
        InfoFromMetadata(instance).name != options.served_model_name) {
      continue;
    }
    std::shared_ptr<Worker> w;
    for (const auto& c : current) {
      if (c->instance.instance_id == instance.instance_id &&
          c->instance.endpoint == instance.endpoint) {
        w = c;
      }
    }
    if (!w) {
      w = Connect(instance);
      log::info("worker {} joined ({}/{})", w->Name(), options.namespace_name, instance.component);
    }
    fresh.push_back(std::move(w));
  }
  for (const auto& c : current) {
    bool kept = false;
    for (const auto& f : fresh) kept = kept || f == c;
    if (!kept) log::info("worker {} left", c->Name());
  }
  if (options.selector) {
    std::vector<InstanceInfo> instances;
    for (const auto& f : fresh) instances.push_back(f->instance);
    std::sort(instances.begin(), instances.end(), [](const auto& a, const auto& b) {
      return a.instance_id < b.instance_id;
    });
    options.selector->SetWorkers(instances);
  }
  // Health of each (outside the lock; a dead worker answers UNAVAILABLE at once).
  struct Poll {
    bool ok;
    EngineClientStats stats;
    std::string failure;  // the Health call's error; empty when it answered
  };
  std::vector<Poll> polls;
  const auto polls_started = std::chrono::steady_clock::now();
  for (const auto& w : fresh) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    v1::HealthRequest request;
    v1::HealthResponse response;
    grpc::Status st = w->stub->Health(&context, request, &response);
    polls.push_back({st.ok() && response.ready(), StatsFromProto(response),
                     st.ok() ? "" : fmt::format("{}: {}", GrpcCodeName(st.error_code()),
                                                st.error_message())});
  }
  int num_healthy = 0;
  std::vector<std::string> went_down;  // logged outside the lock
  {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < fresh.size(); ++i) {
      // A call that found it gone after this poll began outranks the poll.
      const bool was_healthy = fresh[i]->healthy;
      fresh[i]->healthy = polls[i].ok && fresh[i]->lost_at <= polls_started;
      if (was_healthy && !fresh[i]->healthy && !polls[i].failure.empty()) {
        went_down.push_back(fmt::format("{} ({})", fresh[i]->Name(), polls[i].failure));
      }
      num_healthy += fresh[i]->healthy;
      if (polls[i].ok) {
        fresh[i]->stats = polls[i].stats;
        ServedModelInfo seen = InfoFromMetadata(fresh[i]->instance);
        if (!seen.name.empty()) info.name = seen.name;
        if (seen.max_model_len > 0) info.max_model_len = seen.max_model_len;
        if (seen.vocab_size > 0) info.vocab_size = seen.vocab_size;
      }
    }
    workers = std::move(fresh);
    WakeWaiter();  // a request waiting for a worker may go now
    if (num_healthy == last_num_workers) {
      num_healthy = -1;  // unchanged: no callback
    } else {
      last_num_workers = num_healthy;
    }
  }
  for (const std::string& w : went_down) {
    log::warn("worker {} is unreachable: no new requests go to it until its health check passes",
              w);
  }
  PublishLive();
  if (num_healthy >= 0 && options.on_workers_changed) options.on_workers_changed(num_healthy);
}

void RemoteEngineClient::Impl::MarkLost(const std::shared_ptr<Worker>& w) {
  {
    std::lock_guard<std::mutex> lock(mu);
    w->lost_at = std::chrono::steady_clock::now();
    if (!w->healthy) return;
    w->healthy = false;
  }
  log::warn("worker {} is unreachable: no new requests go to it until its health check passes",
            w->Name());
  PublishLive();
}

void RemoteEngineClient::Impl::PublishLive() {
  if (!options.selector) return;
  std::lock_guard<std::mutex> serial(live_mu);
  std::vector<std::string> live;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& w : workers) {
      if (w->healthy) live.push_back(w->instance.instance_id);
    }
  }
  std::sort(live.begin(), live.end());
  if (published_live == live) return;
  options.selector->SetLive(live);
  published_live = std::move(live);
}

std::shared_ptr<Worker> RemoteEngineClient::Impl::Select(const GenerateRequest& request) {
  std::vector<std::shared_ptr<Worker>> live;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (calls.count(request.request_id)) return nullptr;  // Submit refuses the duplicate
    for (const auto& w : workers) {
      if (w->healthy) live.push_back(w);
    }
  }
  if (live.empty()) return nullptr;
  std::vector<std::string> ids;
  for (const auto& w : live) ids.push_back(w->instance.instance_id);
  Result<std::string> chosen = options.selector->Select(request, ids);
  if (chosen.ok()) {
    for (auto& w : live) {
      if (w->instance.instance_id == *chosen) return std::move(w);
    }
  }
  options.selector->OnFinished(request.request_id);  // round-robin instead
  return nullptr;
}

RemoteEngineClient::RemoteEngineClient(std::shared_ptr<Discovery> discovery,
                                       RemoteEngineClientOptions options)
    : impl_(std::make_shared<Impl>()) {
  impl_->discovery = std::move(discovery);
  impl_->options = std::move(options);
  impl_->info = impl_->options.fallback_model_info;
  if (impl_->info.name.empty()) impl_->info.name = impl_->options.served_model_name;
  Impl* impl = impl_.get();
  impl_->refresher = std::thread([impl] {
    std::unique_lock<std::mutex> lock(impl->refresh_mu);
    while (!impl->refresh_stop) {
      impl->refresh_now = false;
      lock.unlock();
      impl->Refresh();
      lock.lock();
      // Requests waiting for a worker: look more often, so one that joins is used at once.
      const auto interval = impl->num_parked > 0
                                ? std::min(impl->options.refresh_interval, std::chrono::milliseconds(100))
                                : impl->options.refresh_interval;
      impl->refresh_cv.wait_for(lock, interval, [impl] { return impl->refresh_stop || impl->refresh_now; });
    }
  });
  impl_->waiter = std::thread([impl] { impl->RunWaiter(); });
}

RemoteEngineClient::~RemoteEngineClient() {
  {
    std::lock_guard<std::mutex> lock(impl_->refresh_mu);
    impl_->refresh_stop = true;
  }
  impl_->refresh_cv.notify_all();
  impl_->refresher.join();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->waiter_stop = true;  // waiting requests end with kAbort
    impl_->WakeWaiter();
  }
  impl_->waiter.join();

  std::vector<std::shared_ptr<CallEntry>> entries;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto& [id, e] : impl_->calls) entries.push_back(e);
  }
  for (auto& e : entries) {
    e->cancelled = true;
    e->context->TryCancel();
  }
  std::unique_lock<std::mutex> lock(impl_->mu);
  if (!impl_->drained.wait_for(lock, std::chrono::seconds(5),
                               [this] { return impl_->num_active == 0; })) {
    // Their reactors still point at the Impl (and must not drop the last reference to it on a
    // gRPC thread, see Impl::CallEnded): it is left to them, never freed.
    log::error("remote engine client: {} calls still running at shutdown (their state is leaked)",
               impl_->num_active);
    lock.unlock();
    static_cast<void>(new std::shared_ptr<Impl>(std::move(impl_)));
  }
}

Status RemoteEngineClient::Submit(GenerateRequest request, OutputCallback on_output) {
  return impl_->Submit(std::move(request), std::move(on_output));
}

void RemoteEngineClient::Cancel(const std::string& request_id) {
  std::shared_ptr<CallEntry> entry;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto mark = [&](const auto& list) {
      for (const auto& p : list) {
        if (p->request.request_id != request_id) continue;
        p->cancelled = true;  // the waiter thread delivers the kAbort (or cancels the call it made)
        impl_->WakeWaiter();
        return true;
      }
      return false;
    };
    if (mark(impl_->parked) || mark(impl_->dispatching)) return;
    auto it = impl_->calls.find(request_id);
    if (it == impl_->calls.end()) return;
    entry = it->second;
  }
  entry->cancelled = true;
  entry->context->TryCancel();
}

EngineClientStats RemoteEngineClient::Stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  EngineClientStats s;
  for (const auto& w : impl_->workers) {
    if (!w->healthy) continue;
    s.engine.num_running += w->stats.engine.num_running;
    s.engine.num_waiting += w->stats.engine.num_waiting;
    s.engine.num_kv_blocks_total += w->stats.engine.num_kv_blocks_total;
    s.engine.num_kv_blocks_used += w->stats.engine.num_kv_blocks_used;
    s.engine.prefix_cache_queries += w->stats.engine.prefix_cache_queries;
    s.engine.prefix_cache_hits += w->stats.engine.prefix_cache_hits;
    const EngineStats& e = w->stats.engine;
    s.engine.kv_offload_host_blocks += e.kv_offload_host_blocks;
    s.engine.kv_offload_host_capacity_blocks += e.kv_offload_host_capacity_blocks;
    s.engine.kv_offloaded_blocks += e.kv_offloaded_blocks;
    s.engine.kv_onboarded_blocks += e.kv_onboarded_blocks;
    s.engine.kv_offloaded_bytes += e.kv_offloaded_bytes;
    s.engine.kv_onboarded_bytes += e.kv_onboarded_bytes;
    s.engine.kv_offload_seconds += e.kv_offload_seconds;
    s.engine.kv_onboard_seconds += e.kv_onboard_seconds;
    s.engine.kv_offload_disk_blocks += e.kv_offload_disk_blocks;
    s.engine.kv_offload_disk_capacity_blocks += e.kv_offload_disk_capacity_blocks;
    s.engine.kv_offload_disk_written_blocks += e.kv_offload_disk_written_blocks;
    s.engine.kv_offload_disk_written_bytes += e.kv_offload_disk_written_bytes;
    s.engine.kv_offload_disk_read_blocks += e.kv_offload_disk_read_blocks;
    s.engine.kv_offload_disk_read_bytes += e.kv_offload_disk_read_bytes;
    s.engine.kv_offload_disk_write_seconds += e.kv_offload_disk_write_seconds;
    s.engine.kv_offload_disk_read_seconds += e.kv_offload_disk_read_seconds;
    s.engine.kv_offload_disk_write_errors += e.kv_offload_disk_write_errors;
    s.engine.kv_offload_disk_corrupt += e.kv_offload_disk_corrupt;
    s.engine.kv_offload_fetched_blocks += e.kv_offload_fetched_blocks;
  }
  s.num_pending = static_cast<int>(impl_->calls.size() + impl_->parked.size());
  return s;
}

ServedModelInfo RemoteEngineClient::model_info() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->info;
}

std::vector<RemoteWorkerStatus> RemoteEngineClient::Workers() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<RemoteWorkerStatus> out;
  for (const auto& w : impl_->workers) out.push_back({w->instance, w->healthy, w->stats});
  return out;
}

void RemoteEngineClient::Refresh() { impl_->Refresh(); }

}  // namespace tandem::runtime
