// The device calls of the cuda_ipc backend (cuda_ipc_backend.h), behind an interface so that the
// transfer library stays free of CUDA and the backend runs in CI on a fake.
//
// Real: MakeCudaIpcApi (src/transfer/cuda/cuda_ipc_api.h, target tandem_transfer_cuda): handles
// from cudaIpcGetMemHandle of the allocation base (found with cuMemGetAddressRange), opened with
// cudaIpcOpenMemHandle(cudaIpcMemLazyEnablePeerAccess), copies with cudaMemcpyAsync
// (cudaMemcpyDefault: UVA, peer to peer across devices) or cudaMemcpyBatchAsync or a copy kernel
// (transfer/cuda/sm_copy.h) on non-blocking streams, completion by cudaEventQuery. Fake: tests/unit/transfer/fake_device.h (POSIX shared memory named by the
// handle, copies by memcpy on a worker thread, injectable faults).
//
// Addresses are device pointers valid in this process (our own allocations, or the base returned
// by Open plus an offset); lengths are bytes; device ids are this process's ordinals.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::transfer {

// What a peer needs to map a registered region: the handle of the allocation that holds it (opaque
// bytes, at most 4 KiB) and the region's offset from the allocation's base.
struct IpcExport {
  std::string handle;
  uint64_t offset = 0;
};

// The point in a queue's order after every copy enqueued before it. Query is thread-safe.
class IpcEvent {
 public:
  virtual ~IpcEvent() = default;
  // true: every copy before the event landed; false: not yet; an error: a copy failed (the
  // device's message).
  virtual Result<bool> Query() = 0;
};

// Copies in order on one device (a CUDA stream). Not thread-safe: one thread enqueues at a time.
class IpcQueue {
 public:
  virtual ~IpcQueue() = default;  // waits for the copies enqueued
  virtual int32_t device_id() const = 0;
  // Enqueues device [dst, +len) <- device [src, +len); either side may be opened peer memory.
  // Returns before the copy ran; both ranges must stay valid until an event after it is done.
  // Errors: Internal with the device's message (the copy was not enqueued).
  virtual Status Copy(uint64_t dst, uint64_t src, uint64_t len) = 0;
  // The same for many ranges at once (a block table scattered over the pool: hundreds of 64 KiB
  // pieces), in one submission where the device allows it (CUDA: cudaMemcpyBatchAsync, or one
  // kernel), so the cost per piece is not a driver call each. The copies may run in any order
  // among themselves. Default: Copy in a loop.
  struct CopyOp {
    uint64_t dst = 0, src = 0, len = 0;
  };
  struct BatchOptions {
    // The other side of the copies is another device's memory (a peer GPU).
    bool between_devices = false;
    // > 0: the device's SMs copy, `sm_ctas` thread blocks of one kernel, instead of its copy
    // engines, where the device can (CUDA: ranges 16-byte aligned; others go to the copy engines).
    int sm_ctas = 0;
  };
  virtual Status CopyBatch(const std::vector<CopyOp>& ops, const BatchOptions& options) {
    (void)options;
    for (const CopyOp& op : ops) TANDEM_RETURN_IF_ERROR(Copy(op.dst, op.src, op.len));
    return Status::Ok();
  }
  virtual Result<std::unique_ptr<IpcEvent>> Record() = 0;
};

// Thread-safe.
class IpcMemoryApi {
 public:
  virtual ~IpcMemoryApi() = default;
  virtual std::string name() const = 0;  // "cuda", "fake"
  // The handle of the allocation holding device [addr, +len) of `device` and addr's offset in it.
  // Errors: InvalidArgument when the range is not inside one device allocation of `device`;
  // Internal from the device.
  virtual Result<IpcExport> Export(uint64_t addr, uint64_t len, int32_t device) = 0;
  // Maps a handle (from another process, or this one) for copies on `local_device`; returns the
  // allocation's base address in this process. Errors: NotFound when the exporter's allocation is
  // gone (its process ended); Internal when the device refuses.
  virtual Result<uint64_t> Open(const std::string& handle, int32_t local_device) = 0;
  // Unmaps what Open returned; no copy may use it any more.
  virtual void Close(uint64_t base, int32_t local_device) = 0;
  // Errors: InvalidArgument for a device that does not exist; Internal from the device.
  virtual Result<std::unique_ptr<IpcQueue>> NewQueue(int32_t device) = 0;
};

}  // namespace tandem::transfer
