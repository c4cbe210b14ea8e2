// WorkerService: the implementation of service tandem.v1.Worker (gRPC callback API) over an
// EngineClient. Internal to src/rpc (it includes the generated gRPC header); WorkerServer
// hosts it. New RPCs of the Worker service are added here.
#pragma once

#include <atomic>
#include <memory>

#include "engine/engine_client.h"
#include "events/event_plane.h"
#include "events/event_ring.h"
#include "rpc/remote_prefill.h"
#include "rpc/tandem.grpc.pb.h"

namespace tandem::runtime {

class WorkerService final : public v1::Worker::CallbackService {
 public:
  // `remote_prefill`: set on prefill workers; null elsewhere (RemotePrefill is UNIMPLEMENTED).
  WorkerService(std::shared_ptr<EngineClient> engine,
                std::shared_ptr<RemotePrefillHandler> remote_prefill)
      : engine_(std::move(engine)), remote_prefill_(std::move(remote_prefill)) {}

  grpc::ServerWriteReactor<v1::GenerateOutput>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const v1::HealthRequest* request,
                                   v1::HealthResponse* response) override;
  grpc::ServerUnaryReactor* RemotePrefill(grpc::CallbackServerContext* context,
                                          const v1::RemotePrefillRequest* request,
                                          v1::RemotePrefillResponse* response) override;
  grpc::ServerUnaryReactor* CancelRemotePrefill(grpc::CallbackServerContext* context,
                                                const v1::CancelRemotePrefillRequest* request,
                                                v1::CancelRemotePrefillResponse* response) override;
  // The event plane's RPCs (worker_events_service.cc).
  grpc::ServerWriteReactor<v1::EventMessage>* SubscribeEvents(
      grpc::CallbackServerContext* context, const v1::SubscribeEventsRequest* request) override;
  grpc::ServerUnaryReactor* Snapshot(grpc::CallbackServerContext* context,
                                     const v1::SnapshotRequest* request,
                                     v1::SnapshotResponse* response) override;

  void SetReady(bool ready) { ready_.store(ready); }
  // Before the server starts: the ring SubscribeEvents serves and the snapshot hook (either null).
  void SetEvents(std::shared_ptr<EventRing> ring, SnapshotProvider snapshot) {
    events_ = std::move(ring);
    snapshot_ = std::move(snapshot);
  }

 private:
  std::shared_ptr<EngineClient> engine_;
  std::shared_ptr<RemotePrefillHandler> remote_prefill_;
  std::atomic<bool> ready_{true};
  std::shared_ptr<EventRing> events_;
  SnapshotProvider snapshot_;
};

}  // namespace tandem::runtime
