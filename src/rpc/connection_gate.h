// ConnectionGate: the worker server's own TCP accept loop, in front of gRPC, for two limits that
// gRPC 1.51 (Debian 12) cannot set itself: a cap on open connections (GRPC_ARG_MAX_ALLOWED_
// INCOMING_CONNECTIONS came in a later release) and a deadline for the HTTP/2 client preface
// that also holds for connections handed over by descriptor (grpc::AddInsecureChannelFromFd, which
// bypasses gRPC's handshake timeout).
//
// One thread polls the listening socket and the connections still waiting for their preface:
//   - a connection beyond `max_connections` (counting those waiting and those handed over and
//     still open) is closed at once, and a warning says so at most once per 10 s;
//   - one whose first bytes are the HTTP/2 client preface (RFC 9113 section 3.4: the 24 bytes
//     "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", then a SETTINGS frame, of which the gate checks the
//     9-byte header) is handed to `handoff` (it then owns the descriptor);
//   - one that sends anything else, closes, or is silent for `handshake_timeout_ms` is closed;
//   - accept() out of descriptors (EMFILE/ENFILE) refuses what waits in the backlog with a spare
//     descriptor (common/spare_descriptor.h), pauses accepts 50 ms to 1 s, one line per 10 s.
// A handed-over connection counts until its descriptor is closed (by gRPC): the gate notices by
// fstat(), comparing the socket's inode, once a second and before refusing one at the cap.
// Linux/POSIX only.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace tandem::runtime {

class ConnectionGate {
 public:
  struct Options {
    std::string host = "127.0.0.1";  // an IPv4/IPv6 address or a name; "[::]" and "::" bind IPv6
    int port = 0;                    // 0: an ephemeral port (see port())
    int max_connections = 1024;      // > 0
    int handshake_timeout_ms = 10000;  // > 0
    std::string name = "worker gRPC";  // for log lines
  };
  // Called on the gate's thread with a connected, non-blocking, close-on-exec socket whose preface
  // has arrived (not yet read); it takes ownership of `fd`.
  using Handoff = std::function<void(int fd)>;

  ConnectionGate();
  ~ConnectionGate();  // Stop()
  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;

  // Binds, listens and starts the thread. InvalidArgument: a limit <= 0; FailedPrecondition: cannot
  // bind (port in use, bad host) or already started.
  Status Start(Options options, Handoff handoff);
  int port() const;  // the bound port; 0 before Start()
  // Connections waiting for their preface plus those handed over and not yet closed.
  int num_connections() const;
  // Stops the thread, closes the listening socket and the connections still waiting; handed-over
  // ones are their owner's. Idempotent.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::runtime
