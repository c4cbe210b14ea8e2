// Worker.SubscribeEvents and Worker.Snapshot (tandem.proto): the server side of the embedded event
// plane (event_plane.h) over the worker's EventRing.
#include <deque>
#include <mutex>

#include "common/logging.h"
#include "common/tsan.h"
#include "rpc/proto_convert.h"
#include "rpc/worker_service.h"

namespace tandem::runtime {
namespace {

// Events a subscriber may have queued before it is ended as too slow.
constexpr size_t kMaxQueuedEvents = 16384;

// One SubscribeEvents call. The ring's listener (the publishing thread) queues events; one write
// is in flight at a time; OnWriteDone starts the next. The listener holds only `Shared` and tells
// the ring to drop it (returns false) once the call is over, so the ring never calls into a
// deleted reactor and no reaction calls into the ring. Finish is never called while a write is in
// flight, so OnDone (which deletes the reactor) comes after the last write. Every callback acquires
// what the thread of the previous start call released (common/tsan.h).
class SubscribeEventsReactor final : public grpc::ServerWriteReactor<v1::EventMessage> {
 public:
  SubscribeEventsReactor(EventRing& ring, const v1::SubscribeEventsRequest& request)
      : shared_(std::make_shared<Shared>()) {
    shared_->reactor = this;
    tsan::Release(this);
    StartSendInitialMetadata();  // the subscriber knows it is connected before any event
    const uint64_t epoch = ring.epoch();
    const uint64_t from =
        request.epoch() != 0 && request.epoch() != epoch ? 1 : request.from_sequence();
    ring.Listen(request.subject(), from,
                [shared = shared_, epoch](const Event& e) { return shared->Push(e, epoch); });
  }

  void OnWriteDone(bool ok) override {
    tsan::Acquire(this);
    const v1::EventMessage* next = nullptr;
    bool finish = false;
    grpc::Status status = grpc::Status::OK;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->queue.pop_front();
      if (!ok || shared_->cancelled) {
        status = grpc::Status(grpc::StatusCode::CANCELLED, "the stream broke");
        finish = true;
      } else if (shared_->overflowed) {
        status = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                              "the subscriber fell behind; reconnect and resync");
        finish = true;
      } else if (!shared_->queue.empty()) {
        next = &shared_->queue.front();
      }
      if (finish) {
        if (shared_->finish_called) finish = false;
        shared_->finish_called = true;
      }
      shared_->writing = next != nullptr;
    }
    tsan::Release(this);
    if (next) StartWrite(next);
    else if (finish) Finish(status);
  }

  void OnCancel() override {
    tsan::Acquire(this);
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->cancelled = true;
      if (!shared_->writing && !shared_->finish_called) finish = shared_->finish_called = true;
    }
    tsan::Release(this);
    if (finish) Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override {
    tsan::Acquire(this);
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->reactor = nullptr;
    }
    delete this;
  }

 private:
  struct Shared {
    std::mutex mu;
    SubscribeEventsReactor* reactor = nullptr;
    std::deque<v1::EventMessage> queue;  // front = the write in flight
    bool writing = false;
    bool finish_called = false;
    bool cancelled = false;
    bool overflowed = false;

    // The ring's listener: false once this call no longer wants events.
    bool Push(const Event& e, uint64_t epoch) {
      SubscribeEventsReactor* r = nullptr;
      const v1::EventMessage* start = nullptr;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (finish_called || cancelled || reactor == nullptr || overflowed) return false;
        if (queue.size() >= kMaxQueuedEvents) {
          overflowed = true;  // OnWriteDone of the write in flight finishes the call
          return false;
        }
        v1::EventMessage& m = queue.emplace_back();
        m.set_subject(e.subject);
        m.set_worker_id(e.worker_id);
        m.set_sequence(e.sequence);
        m.set_payload(e.payload);
        m.set_epoch(epoch);
        if (!writing) {
          writing = true;
          start = &queue.front();
          r = reactor;
        }
      }
      if (start) {  // alive: Finish is not called while `writing`
        tsan::Release(r);
        r->StartWrite(start);
      }
      return true;
    }
  };
  std::shared_ptr<Shared> shared_;
};

}  // namespace

grpc::ServerWriteReactor<v1::EventMessage>* WorkerService::SubscribeEvents(
    grpc::CallbackServerContext* context, const v1::SubscribeEventsRequest* request) {
  tsan::Handoff handoff(this);  // after WorkerServer::Start, before its Stop (common/tsan.h)
  if (!events_ || !ValidSubject(request->subject())) {
    class Refused final : public grpc::ServerWriteReactor<v1::EventMessage> {
     public:
      explicit Refused(grpc::Status st) { Finish(st); }
      void OnDone() override { delete this; }
    };
    return new Refused(!events_ ? grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                               "this worker keeps no events (event plane not embedded)")
                                : grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                               "bad subject '" + request->subject() + "'"));
  }
  return new SubscribeEventsReactor(*events_, *request);
}

grpc::ServerUnaryReactor* WorkerService::Snapshot(grpc::CallbackServerContext* context,
                                                  const v1::SnapshotRequest* request,
                                                  v1::SnapshotResponse* response) {
  tsan::Handoff handoff(this);  // after WorkerServer::Start, before its Stop (common/tsan.h)
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!snapshot_) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                 "this worker serves no snapshot of its events"));
    return reactor;
  }
  Result<EventSnapshot> snap = snapshot_(request->subject());
  if (!snap.ok()) {
    reactor->Finish(ToGrpcStatus(snap.status()));
    return reactor;
  }
  response->set_worker_id(snap->worker_id);
  response->set_sequence(snap->sequence);
  response->set_payload(std::move(snap->payload));
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace tandem::runtime
