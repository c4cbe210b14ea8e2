#include "engine/forward_worker.h"

#include <cstdlib>
#include <utility>

#include "common/logging.h"
#include "common/thread_name.h"

namespace tandem {

ForwardWorker::~ForwardWorker() {
  Wait();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

template <typename Ready>
bool ForwardWorker::Spin(Ready ready) const {
  if (spin_.count() <= 0) return ready();
  const auto until = std::chrono::steady_clock::now() + spin_;
  for (;;) {
    if (ready()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::yield();
  }
}

void ForwardWorker::Submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (has_job_.load(std::memory_order_relaxed)) {
      log::error("ForwardWorker::Submit with a job pending");
      std::abort();
    }
    job_ = std::move(job);
    has_job_.store(true, std::memory_order_relaxed);
    job_ready_.store(true, std::memory_order_release);
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  }
  cv_.notify_all();
}

void ForwardWorker::Wait() {
  if (Spin([this] { return !has_job_.load(std::memory_order_acquire); })) return;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !has_job_.load(std::memory_order_relaxed); });
}

bool ForwardWorker::pending() const { return has_job_.load(std::memory_order_acquire); }

void ForwardWorker::Run() {
  SetCurrentThreadName("tandem-forward");
  for (;;) {
    Spin([this] {
      return job_ready_.load(std::memory_order_acquire) || stop_.load(std::memory_order_acquire);
    });
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] {
        return stop_.load(std::memory_order_relaxed) || job_ready_.load(std::memory_order_relaxed);
      });
      if (stop_.load(std::memory_order_relaxed) && !job_ready_.load(std::memory_order_relaxed)) return;
      job = std::move(job_);
      job_ = nullptr;
      job_ready_.store(false, std::memory_order_relaxed);
    }
    job();
    {
      // Under the lock, so that a Wait that checked has_job_ and is about to sleep cannot miss it.
      std::lock_guard<std::mutex> lock(mu_);
      has_job_.store(false, std::memory_order_release);
    }
    cv_.notify_all();
  }
}

}  // namespace tandem
