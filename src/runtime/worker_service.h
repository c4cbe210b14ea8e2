// WorkerService: the implementation of service tandem.v1.Worker (gRPC callback API) over an
// EngineClient. Internal to src/runtime (it includes the generated gRPC header); WorkerServer
// hosts it. New RPCs of the Worker service are added here.
#pragma once

#include <atomic>
#include <memory>

#include "engine/engine_client.h"
#include "runtime/remote_prefill.h"
#include "runtime/tandem.grpc.pb.h"

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

  void SetReady(bool ready) { ready_.store(ready); }

 private:
  std::shared_ptr<EngineClient> engine_;
  std::shared_ptr<RemotePrefillHandler> remote_prefill_;
  std::atomic<bool> ready_{true};
};

}  // namespace tandem::runtime
