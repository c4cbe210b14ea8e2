#include "rpc/worker_server.h"

#include <chrono>
#include <mutex>

#include <grpcpp/grpcpp.h>
#include <grpcpp/server_posix.h>

#include "common/logging.h"
#include "common/tsan.h"
#include "rpc/connection_gate.h"
#include "rpc/worker_service.h"

namespace tandem::runtime {

struct WorkerServer::Impl {
  WorkerServerOptions options;
  WorkerService service;
  std::mutex mu;
  std::unique_ptr<grpc::Server> server;
  ConnectionGate gate;  // accepts for `server` (declared after it: stopped first)
  int port = 0;
  bool stopped = false;

  Impl(std::shared_ptr<EngineClient> engine, WorkerServerOptions o)
      : options(o), service(std::move(engine), std::move(o.remote_prefill)) {
    service.SetEvents(o.events, o.snapshot);
  }
};

WorkerServer::WorkerServer(std::shared_ptr<EngineClient> engine, WorkerServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(engine), std::move(options))) {}

WorkerServer::~WorkerServer() { Stop(); }

Status WorkerServer::Start() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->server || impl_->stopped) {
    return Status(StatusCode::kFailedPrecondition, "the worker server was already started");
  }
  const WorkerServerOptions& o = impl_->options;
  if (o.handshake_timeout_ms <= 0 || o.keepalive_time_ms <= 0 || o.keepalive_timeout_ms <= 0 ||
      o.max_connection_idle_ms <= 0 || o.max_connections <= 0) {
    return Err(StatusCode::kInvalidArgument, "worker server timeouts and max_connections must be > 0");
  }
  const std::string address = o.host + ":" + std::to_string(o.port);
  grpc::ServerBuilder builder;  // no listening port: the gate accepts and hands connections over
  builder.RegisterService(&impl_->service);
  // Frontends ping idle connections (remote_engine_client.cc) to notice a vanished host.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, o.handshake_timeout_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, o.keepalive_time_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, o.keepalive_timeout_ms);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, o.max_connection_idle_ms);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(64 << 20);
  // The service's handlers run on gRPC's threads from here on (their first step acquires this:
  // common/tsan.h).
  tsan::Release(&impl_->service);
  impl_->server = builder.BuildAndStart();
  if (!impl_->server) return Err(StatusCode::kFailedPrecondition, "cannot start the gRPC server");
  ConnectionGate::Options gate;
  gate.host = o.host;
  gate.port = o.port;
  gate.max_connections = o.max_connections;
  gate.handshake_timeout_ms = o.handshake_timeout_ms;
  grpc::Server* server = impl_->server.get();
  Status st = impl_->gate.Start(gate, [server](int fd) { grpc::AddInsecureChannelFromFd(server, fd); });
  if (!st.ok()) {
    impl_->server->Shutdown();
    impl_->server->Wait();
    impl_->server.reset();
    return Err(StatusCode::kFailedPrecondition, "cannot serve gRPC on {} (in use or bad address): {}",
               address, st.message());
  }
  impl_->port = impl_->gate.port();
  return Status::Ok();
}

int WorkerServer::port() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->port;
}

std::string WorkerServer::endpoint() const {
  std::string host = impl_->options.host;
  if (host == "0.0.0.0" || host == "::" || host == "[::]") host = "127.0.0.1";
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
  return host + ":" + std::to_string(port());
}

void WorkerServer::SetReady(bool ready) { impl_->service.SetReady(ready); }

int WorkerServer::num_connections() const { return impl_->gate.num_connections(); }

void WorkerServer::Stop(int grace_ms) {
  std::unique_ptr<grpc::Server> server;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopped = true;
    server = std::move(impl_->server);
  }
  if (!server) return;
  impl_->gate.Stop();  // no connection is handed to the server once it shuts down
  // Calls still running at the deadline are cancelled (OnCancel -> EngineClient::Cancel).
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms));
  server->Wait();
  tsan::Acquire(&impl_->service);  // every handler has returned (common/tsan.h)
}

}  // namespace tandem::runtime
