// The fake device's IpcMemoryApi (fake_device.h): handles name POSIX shared memory segments,
// copies run by memcpy on one worker thread per queue.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "fake_device.h"

namespace tandem::transfer::testing {

namespace {

// "fake-ipc <shm name> <device> <size>"
std::string EncodeHandle(const std::string& name, int32_t device, uint64_t size) {
  return fmt::format("fake-ipc {} {} {}", name, device, size);
}

}  // namespace

// Copies in order on a worker thread; an event is done when the copies enqueued before it ran.
class FakeIpcQueue final : public IpcQueue {
 public:
  FakeIpcQueue(std::shared_ptr<FakeDevice> dev, int32_t device) : dev_(std::move(dev)), device_(device) {
    worker_ = std::thread([this] { Run(); });
  }
  ~FakeIpcQueue() override {
    {
      std::lock_guard lock(state_->mu);
      stopping_ = true;
    }
    cv_.notify_all();
    worker_.join();  // runs what was enqueued first
  }
  int32_t device_id() const override { return device_; }

  Status Copy(uint64_t dst, uint64_t src, uint64_t len) override {
    std::lock_guard lock(state_->mu);
    const auto due = std::chrono::steady_clock::now() + std::chrono::milliseconds(dev_->delay_ms_.load());
    jobs_.push_back({dst, src, len, due});
    ++state_->enqueued;
    cv_.notify_all();
    return Status::Ok();
  }

  // Copies as Copy does (the fake has no SMs), counting which way the backend asked for.
  Status CopyBatch(const std::vector<CopyOp>& ops, const BatchOptions& options) override {
    ++(options.sm_ctas > 0 ? dev_->sm_batches_ : dev_->engine_batches_);
    return IpcQueue::CopyBatch(ops, options);
  }

  Result<std::unique_ptr<IpcEvent>> Record() override {
    std::lock_guard lock(state_->mu);
    auto e = std::make_unique<Event>(state_, state_->recorded, state_->enqueued);
    state_->recorded = state_->enqueued;
    return std::unique_ptr<IpcEvent>(std::move(e));
  }

 private:
  struct State {
    std::mutex mu;
    uint64_t enqueued = 0, ran = 0, recorded = 0;
    std::map<uint64_t, Status> failed;  // copy number (1-based) -> its error
  };
  // Covers the copies (since, target]: done when they ran, their first error if one failed.
  struct Event final : IpcEvent {
    Event(std::shared_ptr<State> s, uint64_t from, uint64_t n) : state(std::move(s)), since(from), target(n) {}
    Result<bool> Query() override {
      std::lock_guard lock(state->mu);
      auto it = state->failed.upper_bound(since);
      if (it != state->failed.end() && it->first <= target) return it->second;
      return state->ran >= target;
    }
    std::shared_ptr<State> state;
    const uint64_t since, target;
  };
  struct Job {
    uint64_t dst, src, len;
    std::chrono::steady_clock::time_point due;
  };

  void Run() {
    std::unique_lock lock(state_->mu);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      Job job = jobs_.front();
      lock.unlock();
      std::this_thread::sleep_until(job.due);
      Status st;
      uint8_t* d = dev_->AliasAny(job.dst, job.len);
      uint8_t* s = dev_->AliasAny(job.src, job.len);
      if (!d || !s) {
        st = Err(StatusCode::kInternal, "fake device {}: copy {:#x} <- {:#x} +{} outside device memory", device_,
                 job.dst, job.src, job.len);
      } else if (!dev_->Account(job.len)) {
        st = Status(StatusCode::kInternal, "fake device: injected copy failure");
      } else {
        std::memmove(d, s, job.len);
        dev_->d2d_ += job.len;
      }
      lock.lock();
      jobs_.pop_front();
      ++state_->ran;
      if (!st.ok()) state_->failed[state_->ran] = st;
    }
  }

  std::shared_ptr<FakeDevice> dev_;
  const int32_t device_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::condition_variable cv_;
  std::deque<Job> jobs_;  // guarded by state_->mu
  bool stopping_ = false;
  std::thread worker_;
};

class FakeIpc final : public IpcMemoryApi {
 public:
  explicit FakeIpc(std::shared_ptr<FakeDevice> dev) : dev_(std::move(dev)) {}
  std::string name() const override { return "fake"; }

  Result<IpcExport> Export(uint64_t addr, uint64_t len, int32_t device) override {
    std::lock_guard lock(dev_->mu_);
    auto it = dev_->allocs_.upper_bound(addr);
    if (it != dev_->allocs_.begin()) {
      --it;
      const FakeDevice::Allocation& a = it->second;
      if (!a.shm_name.empty() && a.device == device && addr >= it->first && len <= a.len &&
          addr - it->first <= a.len - len) {
        return IpcExport{EncodeHandle(a.shm_name, a.device, a.len), addr - it->first};
      }
    }
    return Err(StatusCode::kInvalidArgument, "{:#x}+{} is not fake device memory of device {}", addr, len, device);
  }

  Result<uint64_t> Open(const std::string& handle, int32_t local_device) override {
    char name[256] = {};
    int device = 0;
    unsigned long long size = 0;
    if (std::sscanf(handle.c_str(), "fake-ipc %255s %d %llu", name, &device, &size) != 3) {
      return Err(StatusCode::kInvalidArgument, "not a fake IPC handle");
    }
    if (local_device < 0 || local_device >= FakeDevice::kNumDevices) {
      return Err(StatusCode::kInvalidArgument, "no fake device {}", local_device);
    }
    if (dev_->fail_opens_.load() > 0) {
      dev_->fail_opens_--;
      return Status(StatusCode::kInternal, "fake device: injected open failure");
    }
    int fd = ::shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
      return Err(errno == ENOENT ? StatusCode::kNotFound : StatusCode::kInternal, "shm_open {}: {}", name,
                 std::strerror(errno));
    }
    void* view = ::mmap(nullptr, size, PROT_NONE, MAP_SHARED, fd, 0);
    void* alias = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (view == MAP_FAILED || alias == MAP_FAILED) {
      if (view != MAP_FAILED) ::munmap(view, size);
      if (alias != MAP_FAILED) ::munmap(alias, size);
      return Err(StatusCode::kInternal, "mmap of {}: {}", name, std::strerror(errno));
    }
    const uint64_t addr = reinterpret_cast<uint64_t>(view);
    std::lock_guard lock(dev_->mu_);
    dev_->allocs_[addr] = FakeDevice::Allocation{device, size, static_cast<uint8_t*>(alias), -1, ""};
    dev_->opens_++;
    return addr;
  }

  void Close(uint64_t base, int32_t local_device) override {
    std::lock_guard lock(dev_->mu_);
    auto it = dev_->allocs_.find(base);
    if (it == dev_->allocs_.end() || !it->second.shm_name.empty()) {
      dev_->violations_ += fmt::format("Close of {:#x}, which Open did not return\n", base);
      return;
    }
    dev_->Unmap(base, it->second);
    dev_->allocs_.erase(it);
    dev_->closes_++;
  }

  Result<std::unique_ptr<IpcQueue>> NewQueue(int32_t device) override {
    if (device < 0 || device >= FakeDevice::kNumDevices) {
      return Err(StatusCode::kInvalidArgument, "no fake device {}", device);
    }
    return std::unique_ptr<IpcQueue>(std::make_unique<FakeIpcQueue>(dev_, device));
  }

 private:
  std::shared_ptr<FakeDevice> dev_;
};

std::shared_ptr<IpcMemoryApi> FakeDevice::ipc() { return std::make_shared<FakeIpc>(shared_from_this()); }

}  // namespace tandem::transfer::testing
