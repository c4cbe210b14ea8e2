// The thread that runs the overlapped engine loop's forward passes (EngineConfig::async_scheduling):
// Submit hands it one job (a call of ModelRunner::Execute), Wait blocks until that job has run.
// One job at a time: the engine submits step N+1 only after Wait returned step N's.
//
// Hand-offs: a waiter (Wait for the job's end, the worker for the next job) first polls for up to
// the spin time, then sleeps on a condition variable. With a GPU runner every microsecond between
// step N's end and step N+1's launch is a microsecond the GPU idles, and a futex wake-up costs tens
// of microseconds (two per step); the synchronous loop's cudaStreamSynchronize polls likewise. With
// a host runner the spin is 0: the forward pass needs every core.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace tandem {

class ForwardWorker {
 public:
  ForwardWorker() = default;
  ~ForwardWorker();  // waits for a submitted job, then joins the thread
  ForwardWorker(const ForwardWorker&) = delete;
  ForwardWorker& operator=(const ForwardWorker&) = delete;

  // How long a hand-off polls before it sleeps (default 0: sleeps at once). Set before the first
  // Submit.
  void set_spin(std::chrono::microseconds spin) { spin_ = spin; }

  // Runs `job` on the worker's thread (started on first use). Precondition: no job is pending
  // (every Submit is followed by a Wait before the next Submit).
  void Submit(std::function<void()> job);
  // Blocks until the submitted job has returned; returns at once when none is pending.
  void Wait();
  bool pending() const;

 private:
  void Run();
  // Polls `ready` (with yields) for up to spin_; true when it held.
  template <typename Ready>
  bool Spin(Ready ready) const;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  std::atomic<bool> has_job_{false};   // submitted, not yet finished
  std::atomic<bool> job_ready_{false}; // submitted, not yet taken by the worker
  std::atomic<bool> stop_{false};  // set under mu_; read by the worker's spin too
  std::chrono::microseconds spin_{0};
  std::thread thread_;
};

}  // namespace tandem
