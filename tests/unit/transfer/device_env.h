// Device memory for the device-memory transfer suite (device_memory_test.cc): a fake device in
// test_transfer (fake_device.cc), real GPU memory through the CUDA copier in test_transfer_cuda
// (cuda/cuda_device_env.cc). The suite reaches device memory only through this interface and
// the agents only through the copier.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "transfer/device_copier.h"
#include "transfer/ipc_memory.h"

namespace tandem::transfer::testing {

// Device memory, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(uint64_t addr, uint64_t size, int32_t device, std::function<void()> free)
      : addr_(addr), size_(size), device_(device), free_(std::move(free)) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (free_) free_();
      addr_ = std::exchange(o.addr_, 0);
      size_ = std::exchange(o.size_, 0);
      device_ = o.device_;
      free_ = std::exchange(o.free_, nullptr);
    }
    return *this;
  }
  ~DeviceBuffer() {
    if (free_) free_();
  }
  uint64_t addr() const { return addr_; }
  uint64_t size() const { return size_; }
  int32_t device() const { return device_; }
  const void* ptr() const { return reinterpret_cast<const void*>(addr_); }

 private:
  uint64_t addr_ = 0, size_ = 0;
  int32_t device_ = 0;
  std::function<void()> free_;
};

// What the copier did (the fake counts; the CUDA env does not).
struct CopyCounts {
  uint64_t to_host = 0, from_host = 0, device_to_device = 0, syncs = 0;
};

class DeviceEnv {
 public:
  virtual ~DeviceEnv() = default;
  virtual std::string name() const = 0;
  // The copier both agents of a test use.
  virtual std::shared_ptr<DeviceCopier> copier() = 0;
  // The cuda_ipc backend's device calls on this env's memory (fake: fake_ipc.cc; CUDA: the real
  // ones); null when the env has none.
  virtual std::shared_ptr<IpcMemoryApi> ipc() { return nullptr; }
  // The devices to put the two sides on (may be the same one).
  virtual int32_t first_device() const = 0;
  virtual int32_t second_device() const = 0;
  virtual DeviceBuffer Alloc(int32_t device, uint64_t bytes) = 0;
  // The test's own access to device memory (not counted, not through the agents' copier).
  virtual void Write(const DeviceBuffer& b, uint64_t offset, const void* src, uint64_t len) = 0;
  virtual void Read(const DeviceBuffer& b, uint64_t offset, void* dst, uint64_t len) = 0;
  virtual std::optional<CopyCounts> counts() const { return std::nullopt; }
  // Fake only: copies run this long after they are enqueued (at the stream's Sync); false when
  // the env cannot do it.
  virtual bool SetCopyDelay(std::chrono::milliseconds delay) { return false; }
  // Fake only: the copy that would bring the count of copied bytes past `bytes` fails (0: none).
  virtual bool FailAfterBytes(uint64_t bytes) { return false; }
};

// Defined by the binary: fake_device.cc (test_transfer) or cuda/cuda_device_env.cc
// (test_transfer_cuda). Null: no device here (the suite skips), with `why` set.
std::unique_ptr<DeviceEnv> MakeDeviceEnv(std::string* why);

}  // namespace tandem::transfer::testing
