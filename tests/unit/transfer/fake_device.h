// A fake device for the transfer tests: "device memory" that faults when anything but the copier
// touches it. Each allocation is a memfd mapped twice: PROT_NONE at the device address (what
// agents register and descriptors name) and read-write at an alias only the copier (and the test,
// through Alias) uses. A backend that dereferences a device address crashes the test.
//
// Copies are deferred: a stream only records them and runs them at Sync (after the copy delay),
// as a GPU runs them later than they are enqueued. A backend that acknowledges a write, reuses a
// staging buffer or releases memory before syncing then shows wrong bytes.
//
// IPC (ipc(), fake_ipc.cc: the cuda_ipc backend's IpcMemoryApi): the memory is POSIX shared memory
// ("/tandem-fake-<pid>-<n>", n counting per process, unlinked when freed; a killed process's are
// removed by UnlinkSegmentsOf, and one left by an earlier process of the same pid is replaced), so
// another process can map it: a handle names
// the segment, Open maps it twice again (PROT_NONE at the returned address, an alias for copies),
// copies run by memcpy on a worker thread per queue, each copy_delay after it was enqueued, and
// events are done when the copies before them ran. Faults: the copy failure above, failing opens
// (set_fail_opens), and a process that exits (its segments vanish: Open says NotFound).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "device_env.h"
#include "transfer/device_copier.h"
#include "transfer/ipc_memory.h"

namespace tandem::transfer::testing {

// Removes the shared memory segments of a process that was killed (one that exits unlinks its own).
void UnlinkSegmentsOf(int pid);

class FakeDevice final : public DeviceCopier, public std::enable_shared_from_this<FakeDevice> {
 public:
  static constexpr int32_t kNumDevices = 4;
  ~FakeDevice() override;

  std::string name() const override { return "fake"; }
  Result<std::unique_ptr<CopyStream>> NewStream(int32_t device_id) override;
  Result<PinnedBuffer> AllocPinned(uint64_t bytes) override;

  DeviceBuffer Alloc(int32_t device, uint64_t bytes);
  // The read-write alias of device [addr, addr + len) on `device`; null (and a recorded violation)
  // when the range is not inside one allocation of that device.
  uint8_t* Alias(int32_t device, uint64_t addr, uint64_t len);

  // The IPC side of this fake (fake_ipc.cc).
  std::shared_ptr<IpcMemoryApi> ipc();
  // The next `n` Opens fail (Internal "injected open failure").
  void set_fail_opens(int n) { fail_opens_ = n; }
  uint64_t opens() const { return opens_.load(); }
  // CopyBatch calls of the IPC queues asking for the SMs (BatchOptions::sm_ctas > 0) and not.
  uint64_t sm_batches() const { return sm_batches_.load(); }
  uint64_t engine_batches() const { return engine_batches_.load(); }
  uint64_t closes() const { return closes_.load(); }

  CopyCounts counts() const;
  std::string violations() const;  // "" when every copy named valid device memory
  void set_copy_delay(std::chrono::milliseconds d) { delay_ms_ = d.count(); }
  // The copy that brings the bytes copied from now on past `b` fails (0: no failure).
  void set_fail_after_bytes(uint64_t b) { fail_after_ = b == 0 ? 0 : copied_.load() + b; }

 private:
  friend class FakeStream;
  friend class FakeIpc;
  friend class FakeIpcQueue;
  struct Allocation {
    int32_t device = 0;
    uint64_t len = 0;
    uint8_t* alias = nullptr;
    int fd = -1;
    std::string shm_name;  // "" for a mapping opened from a handle (not ours to unlink)
  };
  // The alias of [addr, +len) inside any allocation or opened mapping (IPC copies: either side may
  // be another device's or another process's memory); null and a violation otherwise.
  uint8_t* AliasAny(uint64_t addr, uint64_t len);
  void Unmap(uint64_t addr, const Allocation& a);
  void Free(uint64_t addr);
  // Counts `len` copied bytes; false when that passes the failure point.
  bool Account(uint64_t len);

  mutable std::mutex mu_;
  std::map<uint64_t, Allocation> allocs_;  // by device address
  std::string violations_;
  std::atomic<uint64_t> to_host_{0}, from_host_{0}, d2d_{0}, syncs_{0}, copied_{0};
  std::atomic<uint64_t> sm_batches_{0}, engine_batches_{0};
  std::atomic<int64_t> delay_ms_{0};
  std::atomic<uint64_t> fail_after_{0};
  std::atomic<int> fail_opens_{0};
  std::atomic<uint64_t> opens_{0}, closes_{0};
};

}  // namespace tandem::transfer::testing
