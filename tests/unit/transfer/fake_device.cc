#include "fake_device.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace tandem::transfer::testing {

class FakeStream final : public CopyStream {
 public:
  FakeStream(std::shared_ptr<FakeDevice> dev, int32_t device) : dev_(std::move(dev)), device_(device) {}
  ~FakeStream() override { (void)Sync(); }
  int32_t device_id() const override { return device_; }

  Status ToHost(void* dst, uint64_t src, uint64_t len) override {
    ops_.push_back([=, this]() -> Status {
      uint8_t* s = dev_->Alias(device_, src, len);
      if (!s) return Bad("ToHost", src, len);
      if (!dev_->Account(len)) return Failed();
      std::memcpy(dst, s, len);
      dev_->to_host_ += len;
      return Status::Ok();
    });
    return Status::Ok();
  }
  Status FromHost(uint64_t dst, const void* src, uint64_t len) override {
    ops_.push_back([=, this]() -> Status {
      uint8_t* d = dev_->Alias(device_, dst, len);
      if (!d) return Bad("FromHost", dst, len);
      if (!dev_->Account(len)) return Failed();
      std::memcpy(d, src, len);
      dev_->from_host_ += len;
      return Status::Ok();
    });
    return Status::Ok();
  }
  Status DeviceToDevice(uint64_t dst, int32_t src_device, uint64_t src, uint64_t len) override {
    ops_.push_back([=, this]() -> Status {
      uint8_t* d = dev_->Alias(device_, dst, len);
      uint8_t* s = dev_->Alias(src_device, src, len);
      if (!d || !s) return Bad("DeviceToDevice", !d ? dst : src, len);
      if (!dev_->Account(len)) return Failed();
      std::memmove(d, s, len);
      dev_->d2d_ += len;
      return Status::Ok();
    });
    return Status::Ok();
  }
  Status Sync() override {
    if (ops_.empty()) return Status::Ok();
    dev_->syncs_++;
    if (int64_t ms = dev_->delay_ms_.load(); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    Status first;
    for (auto& op : ops_) {
      Status st = first.ok() ? op() : Status::Ok();  // a stream stops at its first fault
      if (first.ok() && !st.ok()) first = st;
    }
    ops_.clear();
    return first;
  }

 private:
  Status Bad(const char* what, uint64_t addr, uint64_t len) const {
    return Err(StatusCode::kInternal, "fake device {}: {} of {:#x}+{} outside device memory", device_, what, addr, len);
  }
  static Status Failed() { return Status(StatusCode::kInternal, "fake device: injected copy failure"); }

  std::shared_ptr<FakeDevice> dev_;
  const int32_t device_;
  std::vector<std::function<Status()>> ops_;
};

FakeDevice::~FakeDevice() {
  std::lock_guard lock(mu_);
  for (auto& [addr, a] : allocs_) Unmap(addr, a);
}

void FakeDevice::Unmap(uint64_t addr, const Allocation& a) {
  ::munmap(reinterpret_cast<void*>(addr), a.len);
  ::munmap(a.alias, a.len);
  if (a.fd >= 0) ::close(a.fd);
  if (!a.shm_name.empty()) ::shm_unlink(a.shm_name.c_str());
}

Result<std::unique_ptr<CopyStream>> FakeDevice::NewStream(int32_t device_id) {
  if (device_id < 0 || device_id >= kNumDevices) {
    return Err(StatusCode::kInvalidArgument, "no fake device {}", device_id);
  }
  return std::unique_ptr<CopyStream>(std::make_unique<FakeStream>(shared_from_this(), device_id));
}

Result<PinnedBuffer> FakeDevice::AllocPinned(uint64_t bytes) {
  void* p = std::malloc(bytes);
  if (!p) return Status(StatusCode::kResourceExhausted, "fake pinned memory");
  return PinnedBuffer(p, bytes, [](void* q) { std::free(q); });
}

void UnlinkSegmentsOf(int pid) {
  const std::string prefix = "tandem-fake-" + std::to_string(pid) + "-";
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) {
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) ::shm_unlink(("/" + std::string(e->d_name)).c_str());
    }
    ::closedir(d);
  }
}

DeviceBuffer FakeDevice::Alloc(int32_t device, uint64_t bytes) {
  // Shared memory with a name, so that another process can open it (fake_ipc.cc).
  static std::atomic<uint64_t> next_shm{0};
  const std::string name = fmt::format("/tandem-fake-{}-{}", ::getpid(), next_shm++);
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    // Left by a killed process that had our pid (the names count per process): not in use.
    ::shm_unlink(name.c_str());
    fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  EXPECT_GE(fd, 0) << name;
  EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(bytes)), 0);
  void* dev = ::mmap(nullptr, bytes, PROT_NONE, MAP_SHARED, fd, 0);
  void* alias = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  EXPECT_NE(dev, MAP_FAILED);
  EXPECT_NE(alias, MAP_FAILED);
  const uint64_t addr = reinterpret_cast<uint64_t>(dev);
  {
    std::lock_guard lock(mu_);
    allocs_[addr] = Allocation{device, bytes, static_cast<uint8_t*>(alias), fd, name};
  }
  std::weak_ptr<FakeDevice> weak = weak_from_this();
  return DeviceBuffer(addr, bytes, device, [weak, addr] {
    if (auto d = weak.lock()) d->Free(addr);
  });
}

void FakeDevice::Free(uint64_t addr) {
  std::lock_guard lock(mu_);
  auto it = allocs_.find(addr);
  if (it == allocs_.end()) return;
  Unmap(addr, it->second);
  allocs_.erase(it);
}

uint8_t* FakeDevice::Alias(int32_t device, uint64_t addr, uint64_t len) {
  std::lock_guard lock(mu_);
  auto it = allocs_.upper_bound(addr);
  if (it != allocs_.begin()) {
    --it;
    const Allocation& a = it->second;
    if (a.device == device && addr >= it->first && len <= a.len && addr - it->first <= a.len - len) {
      return a.alias + (addr - it->first);
    }
  }
  violations_ += fmt::format("device {} range {:#x}+{} is not fake device memory of that device\n", device, addr, len);
  return nullptr;
}

uint8_t* FakeDevice::AliasAny(uint64_t addr, uint64_t len) {
  std::lock_guard lock(mu_);
  auto it = allocs_.upper_bound(addr);
  if (it != allocs_.begin()) {
    --it;
    const Allocation& a = it->second;
    if (addr >= it->first && len <= a.len && addr - it->first <= a.len - len) return a.alias + (addr - it->first);
  }
  violations_ += fmt::format("range {:#x}+{} is neither fake device memory nor an opened handle\n", addr, len);
  return nullptr;
}

bool FakeDevice::Account(uint64_t len) {
  const uint64_t limit = fail_after_.load();
  const uint64_t before = copied_.fetch_add(len);
  return limit == 0 || before + len <= limit;
}

CopyCounts FakeDevice::counts() const {
  return CopyCounts{to_host_.load(), from_host_.load(), d2d_.load(), syncs_.load()};
}

std::string FakeDevice::violations() const {
  std::lock_guard lock(mu_);
  return violations_;
}

namespace {

class FakeDeviceEnv final : public DeviceEnv {
 public:
  FakeDeviceEnv() : dev_(std::make_shared<FakeDevice>()) {}
  ~FakeDeviceEnv() override { EXPECT_EQ(dev_->violations(), ""); }
  std::string name() const override { return "fake"; }
  std::shared_ptr<DeviceCopier> copier() override { return dev_; }
  std::shared_ptr<IpcMemoryApi> ipc() override { return dev_->ipc(); }
  int32_t first_device() const override { return 1; }
  int32_t second_device() const override { return 2; }
  DeviceBuffer Alloc(int32_t device, uint64_t bytes) override { return dev_->Alloc(device, bytes); }
  void Write(const DeviceBuffer& b, uint64_t offset, const void* src, uint64_t len) override {
    uint8_t* p = dev_->Alias(b.device(), b.addr() + offset, len);
    ASSERT_NE(p, nullptr);
    std::memcpy(p, src, len);
  }
  void Read(const DeviceBuffer& b, uint64_t offset, void* dst, uint64_t len) override {
    uint8_t* p = dev_->Alias(b.device(), b.addr() + offset, len);
    ASSERT_NE(p, nullptr);
    std::memcpy(dst, p, len);
  }
  std::optional<CopyCounts> counts() const override { return dev_->counts(); }
  bool SetCopyDelay(std::chrono::milliseconds delay) override {
    dev_->set_copy_delay(delay);
    return true;
  }
  bool FailAfterBytes(uint64_t bytes) override {
    dev_->set_fail_after_bytes(bytes);
    return true;
  }

 private:
  std::shared_ptr<FakeDevice> dev_;
};

}  // namespace

std::unique_ptr<DeviceEnv> MakeDeviceEnv(std::string* why) { return std::make_unique<FakeDeviceEnv>(); }

}  // namespace tandem::transfer::testing
