// WorkerServer: a worker's gRPC server (service tandem.v1.Worker, tandem.proto) over an
// EngineClient (an AsyncEngine in `tandem worker`).
//
//   Generate  submits the request and streams every output; a refused Submit ends the call with
//             the matching status (proto_convert.h, ToGrpcStatus). A call that is cancelled (the
//             client went away, its deadline passed, the server stops) cancels the engine request,
//             so its KV blocks return to the pool.
//   Health    the engine's Stats() and model_info() (ready = SetReady's value).
//   RemotePrefill  WorkerServerOptions::remote_prefill (remote_prefill.h), prefill workers only.
//   SubscribeEvents / Snapshot  the embedded event plane (event_plane.h): WorkerServerOptions::
//             events and ::snapshot (UNIMPLEMENTED when unset).
//
// The service lives in worker_service.cc (callback API); RPCs added to the proto later (e.g.
// RemotePrefill) are implemented there. This header keeps gRPC's headers out of its includers.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "engine/engine_client.h"
#include "events/event_plane.h"
#include "rpc/remote_prefill.h"

namespace tandem::runtime {

struct WorkerServerOptions {
  std::string host = "127.0.0.1";  // address to bind
  int port = 0;                    // 0: an ephemeral port (see port())
  // Prefill workers: serves Worker.RemotePrefill (else it answers UNIMPLEMENTED).
  std::shared_ptr<RemotePrefillHandler> remote_prefill{};
  std::shared_ptr<EventRing> events{};  // this worker's events (the embedded event plane)
  SnapshotProvider snapshot{};          // Worker.Snapshot
  // Stray and vanished clients (gRPC channel arguments; each > 0, milliseconds):
  // a connection that has not completed its HTTP/2 handshake (client preface and SETTINGS)
  // within handshake_timeout_ms of the accept is closed (gRPC's own default: 120 s);
  int handshake_timeout_ms = 10000;
  // a connection silent for keepalive_time_ms is pinged and closed when no answer comes within
  // keepalive_timeout_ms (a client whose host vanished);
  int keepalive_time_ms = 60000;
  int keepalive_timeout_ms = 20000;
  // a connection without a call for max_connection_idle_ms gets a GOAWAY (its client reconnects
  // on its next call).
  int max_connection_idle_ms = 300000;
  // At most max_connections TCP connections at a time (> 0): one beyond is closed at once, with
  // a warning at most every 10 s. gRPC 1.51 (Debian 12) has no such cap (GRPC_ARG_MAX_ALLOWED_
  // INCOMING_CONNECTIONS came later), so the server accepts through its own ConnectionGate
  // (connection_gate.h), which also applies handshake_timeout_ms (to the HTTP/2 client preface)
  // and hands each connection to gRPC by descriptor.
  int max_connections = 1024;
};

class WorkerServer {
 public:
  // `engine` must stay usable until Stop() returned.
  WorkerServer(std::shared_ptr<EngineClient> engine, WorkerServerOptions options);
  ~WorkerServer();  // Stop()
  WorkerServer(const WorkerServer&) = delete;
  WorkerServer& operator=(const WorkerServer&) = delete;

  // Binds and serves on gRPC's threads. FailedPrecondition: cannot bind (port in use, bad host)
  // or already started; InvalidArgument: a timeout or max_connections <= 0.
  Status Start();
  int port() const;              // the bound port; 0 before Start()
  std::string endpoint() const;  // "host:port" to publish in discovery
  int num_connections() const;   // TCP connections open (waiting for their preface or served)
  void SetReady(bool ready);     // reported by Health (default true)
  // Stops accepting calls, cancels those in flight (their engine requests are cancelled), waits
  // for them up to `grace_ms`. Idempotent.
  void Stop(int grace_ms = 2000);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::runtime
