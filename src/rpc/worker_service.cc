#include "rpc/worker_service.h"

#include <deque>
#include <mutex>

#include "common/logging.h"
#include "common/tsan.h"
#include "rpc/proto_convert.h"

namespace tandem::runtime {
namespace {

// One Generate call. The engine callback (engine thread) queues outputs; one write is in flight at
// a time; OnWriteDone (gRPC thread) starts the next or finishes. gRPC methods are called without
// the lock held. The reactor lives until OnDone, which comes only after Finish, and Finish is
// never called while a write is in flight; the engine callback holds only `Shared`, so outputs
// that arrive after Finish are dropped without touching the reactor. Every callback acquires what
// the thread of the previous start call (StartWrite, Finish) released (common/tsan.h).
class GenerateReactor final : public grpc::ServerWriteReactor<v1::GenerateOutput> {
 public:
  GenerateReactor(std::shared_ptr<EngineClient> engine, const v1::GenerateRequest& request)
      : engine_(std::move(engine)), shared_(std::make_shared<Shared>()) {
    shared_->reactor = this;
    request_id_ = request.request_id();
    Status st = engine_->Submit(FromProto(request), [shared = shared_](RequestOutput out) {
      shared->Push(std::move(out));
    });
    tsan::Release(this);  // the reactor's own fields are set; shared_ is under its mutex
    if (!st.ok()) {
      log::info("[{}] refused: {}", request_id_, st.ToString());
      {
        std::lock_guard<std::mutex> lock(shared_->mu);
        shared_->finish_called = true;
        shared_->submitted = false;
      }
      Finish(ToGrpcStatus(st));
    }
  }

  void OnWriteDone(bool ok) override {
    tsan::Acquire(this);
    const v1::GenerateOutput* next = nullptr;
    bool finish = false;
    grpc::Status status = grpc::Status::OK;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      const bool was_last = shared_->queue.front().finished();
      shared_->queue.pop_front();
      if (!ok || shared_->cancelled) {
        finish = !shared_->finish_called;
        status = grpc::Status(grpc::StatusCode::CANCELLED, "the stream broke");
      } else if (was_last) {
        finish = !shared_->finish_called;
      } else if (!shared_->queue.empty()) {
        next = &shared_->queue.front();
      }
      if (finish) shared_->finish_called = true;
      shared_->writing = next != nullptr;
    }
    if (!ok) engine_->Cancel(request_id_);
    tsan::Release(this);
    if (next) StartWrite(next);
    else if (finish) Finish(status);
  }

  void OnCancel() override {
    tsan::Acquire(this);
    // The client went away, its deadline passed, or the server is stopping.
    engine_->Cancel(request_id_);
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
    bool unfinished = false;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      unfinished = shared_->submitted && !shared_->final_seen;
      shared_->reactor = nullptr;
    }
    if (unfinished) engine_->Cancel(request_id_);  // no-op for ids the engine no longer has
    delete this;
  }

 private:
  struct Shared {
    std::mutex mu;
    GenerateReactor* reactor = nullptr;  // null after OnDone
    std::deque<v1::GenerateOutput> queue;  // front = the write in flight (references stay valid)
    bool writing = false;
    bool finish_called = false;
    bool cancelled = false;
    bool submitted = true;
    bool final_seen = false;

    void Push(RequestOutput out) {
      const v1::GenerateOutput* start = nullptr;
      GenerateReactor* r = nullptr;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (out.finished) final_seen = true;
        if (finish_called || cancelled || reactor == nullptr) return;
        queue.emplace_back();
        ToProto(out, &queue.back());
        if (!writing) {
          writing = true;
          start = &queue.front();
          r = reactor;
        }
      }
      // Alive: Finish is not called while `writing`, so OnDone cannot have run.
      if (start) {
        tsan::Release(r);
        r->StartWrite(start);
      }
    }
  };

  std::shared_ptr<EngineClient> engine_;
  std::shared_ptr<Shared> shared_;
  std::string request_id_;
};

// The answer of RemotePrefill and CancelRemotePrefill on a worker without a RemotePrefillHandler.
grpc::Status NotAPrefillWorker() {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      "this worker does not serve remote prefill (not --mode prefill)");
}

// One RemotePrefill call: the handler's `done` finishes it; a cancelled call (caller gone,
// deadline) tells the handler to stop computing. Finish is called exactly once, from `done`; the
// reactor is deleted in OnDone, which comes after Finish.
class RemotePrefillReactor final : public grpc::ServerUnaryReactor {
 public:
  RemotePrefillReactor(std::shared_ptr<RemotePrefillHandler> handler,
                       const v1::RemotePrefillRequest& request, v1::RemotePrefillResponse* response)
      : handler_(std::move(handler)), request_id_(request.request_id()) {
    tsan::Release(this);  // OnCancel may come on another gRPC thread (common/tsan.h)
    handler_->Prefill(FromProto(request), [this, response](Result<RemotePrefillResult> result) {
      if (result.ok()) ToProto(*result, response);
      tsan::Release(this);
      Finish(result.ok() ? grpc::Status::OK : ToGrpcStatus(result.status()));
    });
  }
  void OnCancel() override {
    tsan::Acquire(this);
    handler_->Cancel(request_id_);
  }
  void OnDone() override {
    tsan::Acquire(this);
    delete this;
  }

 private:
  std::shared_ptr<RemotePrefillHandler> handler_;
  std::string request_id_;
};

}  // namespace

grpc::ServerUnaryReactor* WorkerService::RemotePrefill(grpc::CallbackServerContext* context,
                                                       const v1::RemotePrefillRequest* request,
                                                       v1::RemotePrefillResponse* response) {
  tsan::Handoff handoff(this);  // after WorkerServer::Start, before its Stop (common/tsan.h)
  if (!remote_prefill_) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(NotAPrefillWorker());
    return reactor;
  }
  return new RemotePrefillReactor(remote_prefill_, *request, response);
}

grpc::ServerUnaryReactor* WorkerService::CancelRemotePrefill(
    grpc::CallbackServerContext* context, const v1::CancelRemotePrefillRequest* request,
    v1::CancelRemotePrefillResponse* response) {
  tsan::Handoff handoff(this);  // after WorkerServer::Start, before its Stop (common/tsan.h)
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!remote_prefill_) {
    reactor->Finish(NotAPrefillWorker());
    return reactor;
  }
  remote_prefill_->Cancel(request->request_id());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<v1::GenerateOutput>* WorkerService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  tsan::Handoff handoff(this);  // after WorkerServer::Start, before its Stop (common/tsan.h)
  return new GenerateReactor(engine_, *request);
}

grpc::ServerUnaryReactor* WorkerService::Health(grpc::CallbackServerContext* context,
                                                const v1::HealthRequest* request,
                                                v1::HealthResponse* response) {
  tsan::Handoff handoff(this);  // after WorkerServer::Start, before its Stop (common/tsan.h)
  ToProto(engine_->Stats(), engine_->model_info(), ready_.load(), response);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace tandem::runtime
