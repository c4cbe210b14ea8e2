// LogLimiter: at most one log line per interval for a condition that can recur many times a second
// (accept() failing with EMFILE, a flood of refused connections), with the number of occurrences
// it kept quiet in between. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

namespace tandem {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  // `interval`: the least time between two logged occurrences (default 10 s).
  explicit LogLimiter(Clock::duration interval = std::chrono::seconds(10)) : interval_(interval) {}

  // Records one occurrence. True when the caller should log it; then *suppressed (if not null) is
  // the number of occurrences since the previous logged one that were not logged.
  bool ShouldLog(uint64_t* suppressed = nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point now = Clock::now();
    if (logged_once_ && now - last_ < interval_) {
      ++suppressed_;
      return false;
    }
    logged_once_ = true;
    last_ = now;
    if (suppressed != nullptr) *suppressed = suppressed_;
    suppressed_ = 0;
    return true;
  }

 private:
  const Clock::duration interval_;
  std::mutex mu_;
  bool logged_once_ = false;
  Clock::time_point last_{};
  uint64_t suppressed_ = 0;
};

}  // namespace tandem
