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
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ForwardWorker::Submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (has_job_) {
      log::error("ForwardWorker::Submit with a job pending");
      std::abort();
    }
    job_ = std::move(job);
    has_job_ = true;
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  }
  cv_.notify_all();
}

void ForwardWorker::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !has_job_; });
}

bool ForwardWorker::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return has_job_;
}

void ForwardWorker::Run() {
  SetCurrentThreadName("tandem-forward");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || (has_job_ && job_); });
    if (stop_ && !has_job_) return;
    std::function<void()> job = std::move(job_);
    job_ = nullptr;
    lock.unlock();
    job();
    lock.lock();
    has_job_ = false;
    cv_.notify_all();
  }
}

}  // namespace tandem
