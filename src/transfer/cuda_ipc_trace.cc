#include "transfer/cuda_ipc_trace.h"

#include <algorithm>
#include <cstdlib>

#include "common/logging.h"

namespace tandem::transfer::ipc {

bool TraceEnabled() {
  static const bool on = [] {
    const char* v = std::getenv("TANDEM_CUDA_IPC_TRACE");
    return v != nullptr && v[0] == '1';
  }();
  return on;
}

void PhaseTrace::Add(uint64_t bytes, const PhaseTimes& t, std::chrono::steady_clock::time_point ended) {
  auto us = [](std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  std::lock_guard lock(mu_);
  rows_[bytes].push_back({us(t.posted, t.begun), us(t.begun, t.enqueued), us(t.enqueued, t.landed), us(t.landed, ended),
                          us(t.posted, ended), us(t.begun, t.planned), us(t.planned, t.launched),
                          us(t.launched, t.enqueued)});
}

void PhaseTrace::Log() {
  std::lock_guard lock(mu_);
  for (auto& [bytes, rows] : rows_) {
    std::array<double, 8> med{};
    for (size_t k = 0; k < med.size(); ++k) {
      std::vector<double> v;
      for (const auto& r : rows) v.push_back(r[k]);
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      med[k] = v[v.size() / 2];
    }
    log::info("cuda_ipc trace, {} B x {}: median us: post->BEGIN ok {:.1f}, enqueue {:.1f} (plan {:.1f}, launch "
              "{:.1f}, record {:.1f}), copies seen landed {:.1f}, END sent {:.1f}, total {:.1f}",
              bytes, rows.size(), med[0], med[1], med[5], med[6], med[7], med[2], med[3], med[4]);
  }
}

}  // namespace tandem::transfer::ipc
