// The "cuda_ipc" backend: device memory of another process on this node (or of another device in
// this process), copied by the initiator itself through CUDA IPC (issue 7). CUDA-free: the device
// calls go through an IpcMemoryApi (ipc_memory.h); the CUDA one registers this backend under
// "cuda_ipc" (RegisterCudaIpcBackend in transfer/cuda/cuda_ipc_api.h), the tests a fake.
//
// Registration: each device region's RegionMetadata::backend_info["cuda_ipc"] is the allocation's
// IPC handle and the region's offset in it (8 bytes little-endian offset, then the handle).
//
// Control path: each agent's backend listens on an abstract unix socket
// ("@tandem-cuda-ipc-<instance id>", the ConnectionInfo); an initiator keeps one connection per
// peer (opened on the first transfer, again after one broke) and runs request/response messages on
// it (format in cuda_ipc_backend.cc, both ends one host's byte order):
//   hello (name, the target's instance id) -> ok | error (another instance listens there);
//   BEGIN(xfer id, remote ranges) -> the target pins its registrations holding the ranges
//     (BackendHost::PinRegistered: out of range -> InvalidArgument, nothing is copied) -> ok | error;
//   END(xfer id, success, notification), not answered: sent once the initiator saw its copies'
//     events done; the target releases the pin and, on success, delivers the notification.
// A connection that closes releases the target's pins of it.
//
// A transfer: BEGIN; open the peer's handles it needs (once per peer, region handle and local
// device; closed when the peer is invalidated or replaced and at shutdown, after the transfers
// that use them); the coalesced segments enqueued on this backend's own queues (a transfer of at
// least stream_split_bytes is split over num_streams queues of the local device); an event per
// queue, polled every poll_us by the completion thread (the caller never waits); END; Complete.
// WRITE is complete when the copies landed and END is in the socket; the notification reaches the
// target's agent a few microseconds later (NIXL's order: data, then notification; a complete
// transfer's notification is not yet delivered). READ is complete when the bytes are in local
// memory and END is sent. (Waiting for an answer to END cost a round trip, ~15 us on an H200 host,
// and held up the completion of the transfers behind it.)
//
// Errors (Status, the transfer ends in kError): the peer's control socket unreachable or closed
// (NotFound "peer ... gone"), the target refusing the ranges (InvalidArgument), a handle that
// cannot be opened (the API's code, "cannot open ... CUDA IPC handle"), a failed copy (Internal),
// the deadline passing while waiting for the peer (Internal "timed out"). Copies already enqueued
// are always waited for before Complete (the device owns the memory until then): the deadline
// bounds every wait on the peer, not a copy the device is running.
//
// Params: "num_streams" (2; 1..16), "stream_split_bytes" (8388608), "poll_us" (10; 1..10000; the
// completion thread sleeps with a 1 us timer slack), "sm_ctas" (132; 0..4096: > 0 copies within
// one GPU with one kernel of that many thread blocks on its SMs instead of its copy engines, on one
// queue, except for a transfer posted with PostOptions::while_computing; IpcQueue::BatchOptions;
// measurements at the default in cuda_ipc_backend.cc), "sm_ctas_peer" (0: the same for copies
// to or from another GPU, chosen by the first segment's device ordinals), "spin_us" (100; 0..10000:
// how long the initiator polls for BEGIN's answer, the target for the next message after each, and
// the submitting thread for the next post after the last transfer ended (and while transfers are
// in flight, up to 20 x spin_us after its last submit), before they sleep; they yield between
// polls. The cost: about one core of the initiator while it posts transfers back to back, e.g.
// during a layer-wise prefill; 0 turns it off), "connect_timeout_ms" (5000).
#pragma once

#include <memory>

#include "common/status.h"
#include "transfer/backend.h"
#include "transfer/ipc_memory.h"

namespace tandem::transfer {

// A factory for RegisterBackendFactory("cuda_ipc", ...) moving memory through `api`.
BackendFactory MakeCudaIpcBackendFactory(std::shared_ptr<IpcMemoryApi> api);

}  // namespace tandem::transfer
