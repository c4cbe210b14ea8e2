// The CPU engine's one thread pool (issue 29): the kernels split their work (rows of a weight, heads
// of attention) into tasks that the calling thread and the pool's workers take in turn.
//
// A pool of N threads is the caller plus N - 1 workers. Between parallel loops a worker spins for
// kSpinMicros (a decode step's many small loops follow each other closely), then sleeps on a futex
// until the next loop. One loop runs at a time: a ParallelFor that finds the pool busy (another thread's
// loop, or a ParallelFor from inside a task) runs all its tasks on its caller, in order.
//
// CpuPool() is the process's pool, made on first use with common/cpu_cores.h UsableCores() threads;
// SetCpuPoolThreads replaces it (kernels/cpu/matmul.h SetLinearThreads is the public way).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace tandem::cpu {

class ThreadPool {
 public:
  static constexpr int kSpinMicros = 50;

  // num_threads >= 1 (less is taken as 1); starts num_threads - 1 workers.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(task) for every task in [0, num_tasks) (each exactly once, in any order and on any of
  // the pool's threads) and returns when all have returned. fn must not throw.
  // 0 <= num_tasks < 2^20.
  template <typename Fn>
  void ParallelFor(int num_tasks, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    Run(num_tasks, [](void* ctx, int task) { (*static_cast<F*>(ctx))(task); }, const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using TaskFn = void (*)(void* ctx, int task);

  void Run(int num_tasks, TaskFn fn, void* ctx);
  void WorkerLoop();
  // Claims and runs tasks of loop `gen` until none is left.
  void Drain(uint32_t gen);

  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // held by the thread whose loop runs
  // Loop state, one word: generation (24 bits) | num_tasks (20) | next task (20).
  std::atomic<uint64_t> state_{0};
  std::atomic<uint32_t> epoch_{0};     // the generation of the latest loop; workers wait on it
  std::atomic<int> done_{0};           // tasks of the current loop that have returned
  std::atomic<int> sleepers_{0};       // workers blocked in epoch_.wait
  std::atomic<bool> stop_{false};
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  uint32_t gen_ = 0;                   // the caller's generation counter (under run_mu_)
};

// The process's pool (made on first use: UsableCores() threads). A loop running on it when
// SetCpuPoolThreads replaces it finishes on the old pool (the shared_ptr keeps it).
std::shared_ptr<ThreadPool> CpuPool();
// Replaces the process's pool by one of n threads (n < 1: 1); keeps it when it already has n.
void SetCpuPoolThreads(int n);
// CpuPool()->ParallelFor(num_tasks, fn).
template <typename Fn>
void ParallelFor(int num_tasks, Fn&& fn) {
  CpuPool()->ParallelFor(num_tasks, fn);
}

// Returns once v >= target (acquire): spins, then yields the CPU between checks (a thread the OS
// took off its core gets it back). For a task that waits on a task the pool handed out before it.
void SpinUntilAtLeast(const std::atomic<int>& v, int target);

// fn(begin, end) over [0, n) in contiguous ranges of at least min_chunk items (one range, on the
// caller, when n < 2 * min_chunk), a few per thread of the CPU pool.
template <typename Fn>
void ParallelForRange(int64_t n, int64_t min_chunk, Fn&& fn) {
  if (n <= 0) return;
  if (n < 2 * min_chunk) return fn(int64_t{0}, n);
  const std::shared_ptr<ThreadPool> pool = CpuPool();
  const int64_t max_chunks = int64_t{4} * pool->num_threads();
  int64_t chunks = n / (min_chunk < 1 ? 1 : min_chunk);
  if (chunks > max_chunks) chunks = max_chunks;
  const int64_t size = (n + chunks - 1) / chunks;
  pool->ParallelFor(static_cast<int>((n + size - 1) / size), [&](int c) {
    const int64_t begin = c * size;
    fn(begin, begin + size < n ? begin + size : n);
  });
}

}  // namespace tandem::cpu
