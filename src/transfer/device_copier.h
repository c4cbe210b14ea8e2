// Device memory access for backends that move device memory through host memory (tcp, local).
//
// The transfer library stays free of CUDA: an agent that registers device memory is given a
// DeviceCopier (AgentOptions::device_copier). The CUDA one is MakeCudaCopier (src/transfer/cuda,
// target tandem_transfer_cuda, built with the CUDA toolkit); the tests use a fake device whose
// memory faults when touched by anything but its copier (tests/unit/transfer/fake_device.h).
//
// Device addresses are device pointers (uint64_t) of device `device_id`; host pointers are plain
// pointers; lengths are bytes. A backend never dereferences a device address itself.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "common/status.h"

namespace tandem::transfer {

// Copies that run in order on one device (a CUDA stream). The enqueueing calls may return before
// the copy ran: the memory on both sides must stay valid and unchanged until Sync() returned.
// Errors: Internal with the device's message (a bad address, a device fault). Not thread-safe: one
// thread uses a stream at a time.
class CopyStream {
 public:
  virtual ~CopyStream() = default;  // waits for enqueued copies
  virtual int32_t device_id() const = 0;
  // host [dst, dst + len) <- device [src, src + len) of this stream's device.
  virtual Status ToHost(void* dst, uint64_t src, uint64_t len) = 0;
  // device [dst, dst + len) of this stream's device <- host [src, src + len).
  virtual Status FromHost(uint64_t dst, const void* src, uint64_t len) = 0;
  // device [dst, dst + len) of this stream's device <- device [src, src + len) of `src_device`.
  virtual Status DeviceToDevice(uint64_t dst, int32_t src_device, uint64_t src, uint64_t len) = 0;
  // Waits until every copy enqueued so far landed; the first error of any of them otherwise.
  virtual Status Sync() = 0;
};

// Host memory for staging (page-locked for the CUDA copier); freed on destruction. Move-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(void* data, uint64_t size, std::function<void(void*)> free)
      : data_(data), size_(size), free_(std::move(free)) {}
  PinnedBuffer(PinnedBuffer&& o) noexcept { *this = std::move(o); }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      free_ = std::move(o.free_);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { Reset(); }
  void Reset() {
    if (data_ && free_) free_(data_);
    data_ = nullptr;
    size_ = 0;
  }
  uint8_t* data() const { return static_cast<uint8_t*>(data_); }
  uint64_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  uint64_t size_ = 0;
  std::function<void(void*)> free_;
};

// Thread-safe: streams and buffers may be created from any thread.
class DeviceCopier {
 public:
  virtual ~DeviceCopier() = default;
  // What the copier is, for logs ("cuda", "fake").
  virtual std::string name() const = 0;
  // Errors: InvalidArgument for a device that does not exist; Internal from the device.
  virtual Result<std::unique_ptr<CopyStream>> NewStream(int32_t device_id) = 0;
  // Errors: ResourceExhausted when the memory cannot be had.
  virtual Result<PinnedBuffer> AllocPinned(uint64_t bytes) = 0;
};

}  // namespace tandem::transfer
