#include "grammar/mask_precompute.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/thread_name.h"

namespace tandem::grammar {

MaskPrecomputer::~MaskPrecomputer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MaskPrecomputer::Add(std::shared_ptr<TokenMasker> masker) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(masker);
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  }
  cv_.notify_all();
}

void MaskPrecomputer::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return (queue_.empty() && !busy_) || stop_.load(); });
}

void MaskPrecomputer::Run() {
  SetCurrentThreadName("tandem-grammar");
  // Below the engine thread: Linux applies a nice value to the calling thread alone.
  setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return !queue_.empty() || stop_.load(); });
    if (stop_.load()) return;
    std::shared_ptr<TokenMasker> masker = queue_.front().lock();
    queue_.pop_front();
    if (!masker || masker.use_count() == 1) {  // (the queue's lock() is the only holder)
      if (queue_.empty()) cv_.notify_all();
      continue;
    }
    busy_ = true;
    lock.unlock();
    masker->Precompute(&stop_);
    masker.reset();
    lock.lock();
    busy_ = false;
    if (queue_.empty()) cv_.notify_all();
  }
}

}  // namespace tandem::grammar
