#include "rpc/remote_prefill_client.h"

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
  int cancels_in_flight = 0;                                   // CancelRemotePrefill calls
  std::unique_ptr<Discovery::Watch> watch;

  void SetInstances(const std::vector<InstanceInfo>& instances) {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::shared_ptr<PrefillWorker>> updated;
    for (const InstanceInfo& inst : instances) {
      if (!options.served_model_name.empty() &&
          inst.metadata.value("model", std::string()) != options.served_model_name) {
        continue;
      }
      std::shared_ptr<PrefillWorker> w;
      for (const auto& old : workers) {
        if (old->instance.instance_id == inst.instance_id && old->instance.endpoint == inst.endpoint) w = old;
      }
      updated.push_back(w ? w : ConnectPrefill(inst));
    }
    if (updated.size() != workers.size()) {
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
  impl_->cv.wait_for(lock, std::chrono::seconds(5),
                     [&] { return impl_->calls.empty() && impl_->cancels_in_flight == 0; });
}

void RemotePrefillClient::Cancel(const std::string& request_id) {
  auto cancel = std::make_shared<CancelCall>();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (const auto& [id, call] : impl_->calls) {
      if (call->request_id == request_id) cancel->worker = call->worker;
    }
    if (!cancel->worker) return;
    ++impl_->cancels_in_flight;
  }
  cancel->request.set_request_id(request_id);
  cancel->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  std::weak_ptr<Impl> weak = impl_;
  CancelCall* raw = cancel.get();
  tsan::Release(raw);  // the callback runs on a gRPC thread (common/tsan.h)
  cancel->worker->stub->async()->CancelRemotePrefill(
      &raw->context, &raw->request, &raw->response, [weak, cancel, request_id](grpc::Status status) {
        tsan::Acquire(cancel.get());
        if (!status.ok()) {
          log::debug("[{}] cancelling the remote prefill on {} failed: {}: {}", request_id,
                     cancel->worker->instance.instance_id, GrpcCodeName(status.error_code()),
                     status.error_message());
        }
        if (auto impl = weak.lock()) {
          std::lock_guard<std::mutex> lock(impl->mu);
          --impl->cancels_in_flight;
          impl->cv.notify_all();
        }
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
  uint64_t call_id = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->workers.empty()) {
      call.reset();
    } else {
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
      impl_->calls.emplace(call_id, call);
    }
  }
  if (!call) {
    done(Err(StatusCode::kFailedPrecondition, "no prefill worker is available in {}/{}",
             impl_->options.namespace_name, impl_->options.component));
    return;
  }
  if (worker_id) *worker_id = call->worker->instance.instance_id;
  ToProto(request, &call->request);
  call->done = std::move(done);
  call->context.set_deadline(std::chrono::system_clock::now() + timeout);
  std::weak_ptr<Impl> weak = impl_;
  Call* raw = call.get();
  tsan::Release(raw);  // the callback runs on a gRPC thread (common/tsan.h)
  call->worker->stub->async()->RemotePrefill(
      &raw->context, &raw->request, &raw->response, [weak, call_id, call](grpc::Status status) {
        Call* raw = call.get();
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
        raw->done(std::move(result));
        if (auto impl = weak.lock()) {
          std::lock_guard<std::mutex> lock(impl->mu);
          impl->calls.erase(call_id);
          impl->cv.notify_all();
        }
      });
}

}  // namespace tandem::runtime
