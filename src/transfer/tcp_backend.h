// The "tcp" backend: host (and staged device) memory over its own TCP data connections (tcp_wire.h has the format).
//
// Each agent listens on host:port (port 0: ephemeral) and publishes "host:port" in its metadata.
// Toward each peer it keeps num_connections connections (opened lazily on the first transfer, and
// again after one broke); a transfer of at least stripe_min_bytes is split over all of them.
// WRITE: header, remote ranges, payload; the target receives straight into its registered memory
// (after re-checking the ranges against its registrations; a refused payload is drained, never
// written) and acknowledges. READ: the target checks, then sends the bytes back.
//
// Device memory (MemoryKind::kDevice, with the agent's DeviceCopier): each side stages its own
// device ranges through two pinned host buffers of staging_chunk_bytes (staging.h), chunk by
// chunk, the device copy of one chunk overlapping the socket I/O of the other. A WRITE into device
// memory is acknowledged (and its notification delivered) only after the last chunk landed on the
// device; a device error there is answered as an error, the payload drained. An agent without a
// DeviceCopier refuses device ranges (FailedPrecondition).
//
// Failures: a connection that closes or resets fails its in-flight transfers at once; a transfer
// past its deadline fails within a tick (20 ms) and takes its connection down; the target drops a
// connection that stalls mid-message for io_timeout_ms. The next transfer reconnects.
//
// The listener serves each accepted connection on its own thread (tcp_serve.h, ServeConnection).
// The listener against stray or hostile peers: a connection whose hello has not arrived within
// handshake_timeout_ms of its accept is dropped; beyond max_connections accepted connections open
// at once, a new one is answered a kError (ResourceExhausted: the initiator's connect fails with
// that status and message) and closed; accept() out of descriptors (EMFILE, ENFILE) frees a spare
// descriptor to accept and close the waiting connections, then pauses accepting (50 ms, doubling
// to 1 s while it lasts). Each of these logs one warning per 10 s at most, with a count of the rest.
//
// Params: "host" (default 127.0.0.1), "port" (0), "advertise_host" (default host),
// "num_connections" (2), "stripe_min_bytes" (4194304), "io_timeout_ms" (30000),
// "connect_timeout_ms" (5000), "handshake_timeout_ms" (5000, >= 1), "max_connections" (512
// accepted connections, >= 1), "staging_chunk_bytes" (4194304; 4 KiB to 1 GiB). A bad value:
// InvalidArgument.
#pragma once

#include <memory>

#include "common/status.h"
#include "transfer/backend.h"

namespace tandem::transfer {

Result<std::unique_ptr<Backend>> MakeTcpBackend(BackendHost& host, const BackendParams& params);

}  // namespace tandem::transfer
