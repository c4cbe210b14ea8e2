#include "rpc/embedded_event_plane.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "common/logging.h"
#include "discovery/discovery.h"
#include "events/event_ring.h"
#include "rpc/proto_convert.h"
#include "rpc/tandem.grpc.pb.h"
#include "rpc/worker_channel.h"

namespace tandem::runtime {
namespace {

using namespace std::chrono_literals;

class EmbeddedSubscription;

// One Worker.SubscribeEvents stream to one worker, reconnecting until stopped.
class WorkerStream {
 public:
  WorkerStream(EmbeddedSubscription* owner, std::string worker_id, std::string endpoint)
      : owner_(owner), worker_id_(std::move(worker_id)), endpoint_(std::move(endpoint)),
        channel_(CreateWorkerChannel(endpoint_)), stub_(v1::Worker::NewStub(channel_)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~WorkerStream() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      if (context_) context_->TryCancel();
    }
    cv_.notify_all();
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }
  Status status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  void Run();

  EmbeddedSubscription* const owner_;
  const std::string worker_id_;
  const std::string endpoint_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::Worker::Stub> stub_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  grpc::ClientContext* context_ = nullptr;
  Status status_ = Status(StatusCode::kFailedPrecondition, "connecting");
  std::thread thread_;
};

class EmbeddedSubscription final : public Subscription {
 public:
  EmbeddedSubscription(const EventPlaneOptions& options, std::string subject, EventHandlers handlers)
      : subject_(std::move(subject)), handlers_(std::move(handlers)) {
    for (const std::string& component : options.components) {
      watches_.push_back(options.discovery->WatchComponent(
          options.namespace_name, component,
          [this, component](const std::vector<InstanceInfo>& list) { OnWorkers(component, list); },
          options.discovery_interval));
    }
  }
  ~EmbeddedSubscription() override {
    watches_.clear();  // joins: no OnWorkers after this
    std::map<std::string, std::unique_ptr<WorkerStream>> streams;
    {
      std::lock_guard<std::mutex> lock(streams_mu_);
      streams.swap(streams_);
    }
    streams.clear();  // joins every stream: no handler call after this
  }

  Status status() const override {
    std::lock_guard<std::mutex> lock(streams_mu_);
    for (const auto& [key, stream] : streams_) {
      if (Status st = stream->status(); !st.ok()) return st;
    }
    return Status::Ok();
  }

  const std::string& subject() const { return subject_; }

  // The stream of `worker_id` asks from here: the next sequence in the incarnation it knows.
  std::pair<uint64_t, uint64_t> NextFrom(const std::string& worker_id) {
    std::lock_guard<std::mutex> lock(deliver_mu_);
    auto epoch = epochs_.find(worker_id);
    return {detector_.Last(worker_id) + 1, epoch == epochs_.end() ? 0 : epoch->second};
  }

  void Deliver(const v1::EventMessage& m) {
    std::lock_guard<std::mutex> lock(deliver_mu_);
    epochs_[m.worker_id()] = m.epoch();
    Event e{m.subject(), m.worker_id(), m.sequence(), m.payload()};
    if (auto gap = detector_.Check(e); gap && handlers_.on_gap) handlers_.on_gap(*gap);
    handlers_.on_event(e);
  }

 private:
  void OnWorkers(const std::string& component, const std::vector<InstanceInfo>& list) {
    std::vector<std::unique_ptr<WorkerStream>> gone;
    std::lock_guard<std::mutex> lock(streams_mu_);
    const std::string prefix = component + "/";
    for (auto it = streams_.begin(); it != streams_.end();) {
      const bool mine = it->first.rfind(prefix, 0) == 0;
      const auto live = std::find_if(list.begin(), list.end(), [&](const InstanceInfo& i) {
        return prefix + i.instance_id == it->first && i.endpoint == it->second->endpoint();
      });
      if (mine && live == list.end()) {
        gone.push_back(std::move(it->second));
        it = streams_.erase(it);
      } else {
        ++it;
      }
    }
    for (const InstanceInfo& info : list) {
      const std::string key = prefix + info.instance_id;
      if (info.endpoint.empty() || streams_.count(key)) continue;
      streams_[key] = std::make_unique<WorkerStream>(this, info.instance_id, info.endpoint);
    }
    // `gone` joins its threads after the lock is released (they never take streams_mu_).
  }

  const std::string subject_;
  const EventHandlers handlers_;
  std::mutex deliver_mu_;  // handler calls, detector_, epochs_
  GapDetector detector_;
  std::map<std::string, uint64_t> epochs_;
  mutable std::mutex streams_mu_;
  std::map<std::string, std::unique_ptr<WorkerStream>> streams_;  // "<component>/<instance_id>"
  std::vector<std::unique_ptr<Discovery::Watch>> watches_;
};

void WorkerStream::Run() {
  auto backoff = 100ms;
  while (true) {
    const auto [from, epoch] = owner_->NextFrom(worker_id_);
    grpc::ClientContext context;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      context_ = &context;
    }
    v1::SubscribeEventsRequest request;
    request.set_subject(owner_->subject());
    request.set_from_sequence(from);
    request.set_epoch(epoch);
    auto reader = stub_->SubscribeEvents(&context, request);
    reader->WaitForInitialMetadata();
    if (channel_->GetState(false) == GRPC_CHANNEL_READY) {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = Status::Ok();
      backoff = 100ms;
    }
    v1::EventMessage message;
    while (reader->Read(&message)) owner_->Deliver(message);
    const grpc::Status finished = reader->Finish();
    std::unique_lock<std::mutex> lock(mu_);
    context_ = nullptr;
    if (stopping_) return;
    status_ = Err(StatusCode::kFailedPrecondition, "events of worker {} at {}: {}", worker_id_,
                  endpoint_, finished.ok() ? "the stream ended" : finished.error_message());
    cv_.wait_for(lock, backoff, [this] { return stopping_; });
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, 2000ms);
  }
}

class EmbeddedEventPlane final : public EventPlane {
 public:
  explicit EmbeddedEventPlane(EventPlaneOptions options) : options_(std::move(options)) {}

  Result<uint64_t> Publish(const std::string& subject, std::string_view payload) override {
    if (!ValidSubject(subject)) {
      return Err(StatusCode::kInvalidArgument, "event plane: bad subject '{}'", subject);
    }
    if (!options_.ring || options_.worker_id.empty()) {
      return Status(StatusCode::kFailedPrecondition,
                    "event plane (embedded): publishing needs the worker's event ring and id");
    }
    return options_.ring->Publish(subject, options_.worker_id, payload);
  }

  Result<std::unique_ptr<Subscription>> Subscribe(const std::string& subject,
                                                  EventHandlers handlers) override {
    if (!ValidSubject(subject) || !handlers.on_event) {
      return Err(StatusCode::kInvalidArgument, "event plane: bad subject '{}' or no on_event",
                 subject);
    }
    if (!options_.discovery) {
      return Status(StatusCode::kFailedPrecondition,
                    "event plane (embedded): subscribing needs a discovery to find the workers");
    }
    return std::unique_ptr<Subscription>(
        std::make_unique<EmbeddedSubscription>(options_, subject, std::move(handlers)));
  }

  Status Flush(std::chrono::milliseconds) override { return Status::Ok(); }
  std::string url() const override { return "embedded"; }

 private:
  EventPlaneOptions options_;
};

}  // namespace

Result<std::unique_ptr<EventPlane>> MakeEmbeddedEventPlane(EventPlaneOptions options) {
  return std::unique_ptr<EventPlane>(std::make_unique<EmbeddedEventPlane>(std::move(options)));
}

Result<EventSnapshot> FetchSnapshot(const std::string& endpoint, const std::string& subject,
                                    std::chrono::milliseconds timeout) {
  auto stub = v1::Worker::NewStub(CreateWorkerChannel(endpoint));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::SnapshotRequest request;
  request.set_subject(subject);
  v1::SnapshotResponse response;
  const grpc::Status st = stub->Snapshot(&context, request, &response);
  if (!st.ok()) {
    return Err(StatusCode::kFailedPrecondition, "snapshot of {} from the worker at {}: {}", subject,
               endpoint, st.error_message());
  }
  return EventSnapshot{response.worker_id(), response.sequence(), response.payload()};
}

}  // namespace tandem::runtime
