#include "rpc/remote_prefill_client.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include "common/logging.h"
#include "common/tsan.h"
#include "rpc/proto_convert.h"
#include "rpc/tandem.grpc.pb.h"
#include "rpc/worker_channel.h"

namespace tandem::runtime {
namespace {

struct PrefillWorker {
  InstanceInfo instance;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Worker::Stub> stub;
};

std::shared_ptr<PrefillWorker> ConnectPrefill(const InstanceInfo& instance) {
  auto w = std::make_shared<PrefillWorker>();
  w->instance = instance;
  w->channel = CreateWorkerChannel(instance.endpoint);
  w->stub = v1::Worker::NewStub(w->channel);
  return w;
}

// A call is owned by Impl (calls / cancels, then possibly retired), never by gRPC's callback: see
// Impl::Ended.
struct Call {
  std::string request_id;  // set before the call is listed in Impl::calls
  grpc::ClientContext context;
  v1::RemotePrefillRequest request;
  v1::RemotePrefillResponse response;
  std::shared_ptr<PrefillWorker> worker;  // keeps the stub alive for the call
  RemotePrefillDone done;
};

// One CancelRemotePrefill call (fire and forget).
struct CancelCall {
  grpc::ClientContext context;
  v1::CancelRemotePrefillRequest request;
  v1::CancelRemotePrefillResponse response;
  std::shared_ptr<PrefillWorker> worker;
};

}  // namespace

struct RemotePrefillClient::Impl {
  RemotePrefillClientOptions options;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::shared_ptr<PrefillWorker>> workers;  // live, sorted by instance id
  size_t next = 0;
  uint64_t next_call_id = 0;
  std::unordered_map<uint64_t, std::shared_ptr<Call>> calls;  // in flight
  std::unordered_map<const CancelCall*, std::shared_ptr<CancelCall>> cancels;  // in flight
  std::vector<std::shared_ptr<void>> retired;  // ended calls of unlisted workers (Ended)
  std::unique_ptr<Discovery::Watch> watch;

  // A call ended, on gRPC's thread (its callback holds only plain pointers). The last reference to
  // a channel must not be dropped on one of gRPC's callback threads (remote_engine_client_impl.h,
  // Impl::CallEnded: gRPC 1.51 then joins that very thread and deletes the completion queue it
  // polls): the call (its worker and its ClientContext hold the channel) is dropped here under `mu`
  // while `workers` lists its worker, else parked in `retired` for SetInstances (the discovery
  // watch's thread) or ~Impl. The client's destructor waits for every call (or leaks the Impl), so
  // the Impl is never destroyed on a gRPC thread either. Called with `mu` held.
  void Ended(std::shared_ptr<void> ended, const PrefillWorker* worker) {
    const bool listed = std::any_of(workers.begin(), workers.end(),
                                    [&](const auto& w) { return w.get() == worker; });
    if (!listed) retired.push_back(std::move(ended));
    ended.reset();
    cv.notify_all();
  }

  void SetInstances(const std::vector<InstanceInfo>& instances) {
    std::vector<std::shared_ptr<void>> released;  // dropped outside the lock, on this thread
    std::lock_guard<std::mutex> lock(mu);
    released.swap(retired);
    std::vector<std::shared_ptr<PrefillWorker>> updated;
    // Logged when the set changes, a worker replaced by another in one update included (a restart
    // within one discovery poll: the count alone would not move).
    bool changed = false;
    for (const InstanceInfo& inst : instances) {
      if (!options.served_model_name.empty() &&
          inst.metadata.value("model", std::string()) != options.served_model_name) {
        continue;
      }
      std::shared_ptr<PrefillWorker> w;
      for (const auto& old : workers) {
        if (old->instance.instance_id == inst.instance_id && old->instance.endpoint == inst.endpoint) w = old;
      }
      changed = changed || !w;
      updated.push_back(w ? w : ConnectPrefill(inst));
    }
    if (changed || updated.size() != workers.size()) {
      log::info("{} prefill worker(s) available", updated.size());
    }
    workers = std::move(updated);
  }
};

RemotePrefillClient::RemotePrefillClient(std::shared_ptr<Discovery> discovery,
                                         RemotePrefillClientOptions options)
    : impl_(std::make_shared<Impl>()) {
  impl_->options = std::move(options);
  if (auto initial = discovery->List(impl_->options.namespace_name, impl_->options.component);
      initial.ok()) {
    impl_->SetInstances(*initial);
  }
  std::weak_ptr<Impl> weak = impl_;
  impl_->watch = discovery->WatchComponent(
      impl_->options.namespace_name, impl_->options.component,
      [weak](const std::vector<InstanceInfo>& instances) {
        if (auto impl = weak.lock()) impl->SetInstances(instances);
      },
      impl_->options.refresh_interval);
}

RemotePrefillClient::~RemotePrefillClient() {
  impl_->watch.reset();
  std::unique_lock<std::mutex> lock(impl_->mu);
  for (auto& [id, call] : impl_->calls) call->context.TryCancel();
  if (!impl_->cv.wait_for(lock, std::chrono::seconds(5),
                          [&] { return impl_->calls.empty() && impl_->cancels.empty(); })) {
    // Their callbacks still point at the Impl (Impl::Ended): it is left to them, never freed.
    log::error("remote prefill client: {} calls still running at shutdown (their state is leaked)",
               impl_->calls.size() + impl_->cancels.size());
    lock.unlock();
    static_cast<void>(new std::shared_ptr<Impl>(std::move(impl_)));
  }
}

void RemotePrefillClient::Cancel(const std::string& request_id) {
  auto cancel = std::make_shared<CancelCall>();
  CancelCall* raw = cancel.get();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (const auto& [id, call] : impl_->calls) {
      if (call->request_id == request_id) cancel->worker = call->worker;
    }
    if (!cancel->worker) return;
    cancel->request.set_request_id(request_id);
    cancel->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    impl_->cancels.emplace(raw, std::move(cancel));  // owned there (Impl::Ended)
  }
  Impl* impl = impl_.get();
  tsan::Release(raw);  // the callback runs on a gRPC thread (common/tsan.h)
  raw->worker->stub->async()->CancelRemotePrefill(
      &raw->context, &raw->request, &raw->response, [impl, raw](grpc::Status status) {
        tsan::Acquire(raw);
        if (!status.ok()) {
          log::debug("[{}] cancelling the remote prefill on {} failed: {}: {}",
                     raw->request.request_id(), raw->worker->instance.instance_id,
                     GrpcCodeName(status.error_code()), status.error_message());
        }
        std::lock_guard<std::mutex> lock(impl->mu);
        auto it = impl->cancels.find(raw);
        std::shared_ptr<CancelCall> ended = std::move(it->second);
        impl->cancels.erase(it);
        impl->Ended(std::move(ended), raw->worker.get());  // `raw` may be gone after this
      });
}

int RemotePrefillClient::num_workers() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int>(impl_->workers.size());
}

bool RemotePrefillClient::HasWorker(const std::string& instance_id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (const auto& w : impl_->workers) {
    if (w->instance.instance_id == instance_id) return true;
  }
  return false;
}

void RemotePrefillClient::Prefill(const RemotePrefillRequest& request,
                                  std::chrono::milliseconds timeout, RemotePrefillDone done,
                                  std::string* worker_id, const std::string& prefill_worker_id) {
  auto call = std::make_shared<Call>();
  Call* raw = call.get();
  uint64_t call_id = 0;
  bool listed = false;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!impl_->workers.empty()) {
      if (!prefill_worker_id.empty()) {
        for (const auto& w : impl_->workers) {
          if (w->instance.instance_id == prefill_worker_id) call->worker = w;
        }
        if (!call->worker) {
          log::debug("[{}] prefill worker {} (the router's choice) is not live in {}/{}{}: "
                     "choosing round-robin",
                     request.request_id, prefill_worker_id, impl_->options.namespace_name,
                     impl_->options.component,
                     impl_->options.served_model_name.empty()
                         ? std::string()
                         : " serving '" + impl_->options.served_model_name + "'");
        }
      }
      if (!call->worker) call->worker = impl_->workers[impl_->next++ % impl_->workers.size()];
      call_id = ++impl_->next_call_id;
      call->request_id = request.request_id;
      if (worker_id) *worker_id = call->worker->instance.instance_id;
      impl_->calls.emplace(call_id, std::move(call));  // owned there (Impl::Ended)
      listed = true;
    }
  }
  if (!listed) {
    done(Err(StatusCode::kFailedPrecondition, "no prefill worker is available in {}/{}",
             impl_->options.namespace_name, impl_->options.component));
    return;
  }
  // Not yet started: nothing but this thread uses the call's fields (the destructor only cancels).
  ToProto(request, &raw->request);
  raw->done = std::move(done);
  raw->context.set_deadline(std::chrono::system_clock::now() + timeout);
  Impl* impl = impl_.get();
  tsan::Release(raw);  // the callback runs on a gRPC thread (common/tsan.h)
  raw->worker->stub->async()->RemotePrefill(
      &raw->context, &raw->request, &raw->response, [impl, call_id, raw](grpc::Status status) {
        tsan::Acquire(raw);
        Result<RemotePrefillResult> result = RemotePrefillResult{};
        if (status.ok()) {
          result = FromProto(raw->response);
        } else {
          Status st = FromGrpcStatus(status);
          result = Status(st.code(), fmt::format("prefill worker {} ({}): {}: {}",
                                                 raw->worker->instance.instance_id,
                                                 raw->worker->instance.endpoint,
                                                 GrpcCodeName(status.error_code()),
                                                 status.error_message()));
        }
        RemotePrefillDone done = std::move(raw->done);
        done(std::move(result));
        done = nullptr;  // what it holds goes here, outside the client's lock
        std::lock_guard<std::mutex> lock(impl->mu);
        auto it = impl->calls.find(call_id);
        std::shared_ptr<Call> ended = std::move(it->second);
        impl->calls.erase(it);
        impl->Ended(std::move(ended), raw->worker.get());  // `raw` may be gone after this
      });
}

}  // namespace tandem::runtime
