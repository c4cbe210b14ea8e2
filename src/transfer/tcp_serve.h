// The target side of one tcp data connection: what the tcp backend's listener (tcp_backend.h)
// runs on each connection it accepted, in that connection's thread. tcp_wire.h has the format.
#pragma once

#include <atomic>
#include <cstdint>

#include "transfer/backend.h"
#include "transfer/staging.h"

namespace tandem::transfer::tcp {

struct ServeOptions {
  int handshake_timeout_ms = 5000;  // the hello must arrive (and its answer leave) within this
  int io_timeout_ms = 30000;        // a peer that stalls this long mid-message is dropped
  uint64_t staging_chunk_bytes = kDefaultStagingChunkBytes;  // for device ranges (staging.h)
};

// Serves one connection on `fd` until it ends, in the calling thread: reads the peer's kHello
// (aux "<name>\n<instance id>") and answers kHelloOk when it names `host`'s instance, else a
// kError (FailedPrecondition) naming this agent; then answers the requests in order (kWrite
// received into, kRead sent from, memory that host.PinRegistered accepts; a kNotify or a kWrite's
// notification goes to host.DeliverNotification). A refused range is answered kError with the
// pin's Status (a refused WRITE's payload is read and dropped); device ranges are staged through
// host.device_copier() (FailedPrecondition without one).
//
// `fd` is a connected stream socket; SendAll/RecvAll's ticks come from its SO_RCVTIMEO /
// SO_SNDTIMEO (SetSocketOptions) or, on a non-blocking fd, from every EAGAIN. Returns when the
// peer closes, on a socket error, on a malformed or unknown message (the connection is then
// dropped without an answer), when the hello is later than handshake_timeout_ms after the call,
// when the peer stalls mid-message for io_timeout_ms, or within a tick of `stopping` turning true.
// Never closes or shuts down `fd` (the caller does).
void ServeConnection(int fd, BackendHost& host, const ServeOptions& options, const std::atomic<bool>& stopping);

}  // namespace tandem::transfer::tcp
