// The gRPC channel every client of a worker's Worker service uses (frontend -> worker,
// decode -> prefill): keep-alive pings so that a worker whose host vanishes without closing the
// connection is noticed (10 s, 5 s timeout), reconnect backoff at most 1 s, 64 MiB messages.
// Include only from .cc files (gRPC headers).
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

namespace tandem::runtime {

inline std::shared_ptr<grpc::Channel> CreateWorkerChannel(const std::string& endpoint) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  return grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(), args);
}

}  // namespace tandem::runtime
