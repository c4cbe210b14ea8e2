// The thread that runs the overlapped engine loop's forward passes (EngineConfig::async_scheduling):
// Submit hands it one job (a call of ModelRunner::Execute), Wait blocks until that job has run.
// One job at a time: the engine submits step N+1 only after Wait returned step N's.
#pragma once

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

  // Runs `job` on the worker's thread (started on first use). Precondition: no job is pending
  // (every Submit is followed by a Wait before the next Submit).
  void Submit(std::function<void()> job);
  // Blocks until the submitted job has returned; returns at once when none is pending.
  void Wait();
  bool pending() const;

 private:
  void Run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool has_job_ = false;   // submitted, not yet finished
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tandem
