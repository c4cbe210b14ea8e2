// TANDEM_CUDA_IPC_TRACE=1: the cuda_ipc backend (cuda_ipc_backend.h) notes when each phase of
// its transfers ended and logs, at shutdown, the median time of each phase per transfer size, in
// microseconds: post -> BEGIN acknowledged, enqueue (plan: mappings and queues; launch: the copy
// calls or the kernel; record: the events), copies seen landed, END sent, and the total.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace tandem::transfer::ipc {

// Whether TANDEM_CUDA_IPC_TRACE is "1" (read once).
bool TraceEnabled();

// When each phase of one transfer ended.
struct PhaseTimes {
  std::chrono::steady_clock::time_point posted, begun, planned, launched, enqueued, landed;
};

// The traced transfers. Thread-safe.
class PhaseTrace {
 public:
  // One transfer of `bytes` whose END was sent at `ended`.
  void Add(uint64_t bytes, const PhaseTimes& t, std::chrono::steady_clock::time_point ended);
  // One info line per transfer size.
  void Log();

 private:
  std::mutex mu_;
  std::map<uint64_t, std::vector<std::array<double, 8>>> rows_;
};

}  // namespace tandem::transfer::ipc
