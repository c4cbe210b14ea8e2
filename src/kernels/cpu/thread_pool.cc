#include "kernels/cpu/thread_pool.h"

#include <chrono>

#include "common/cpu_cores.h"

namespace tandem::cpu {
namespace {

// Loop state: generation (24 bits) | num_tasks (20) | next task (20).
constexpr int kTaskBits = 20;
constexpr uint64_t kTaskMask = (uint64_t{1} << kTaskBits) - 1;
constexpr uint32_t kGenMask = (1u << 24) - 1;

uint64_t Pack(uint32_t gen, int num_tasks, int next) {
  return (uint64_t{gen} << (2 * kTaskBits)) | (static_cast<uint64_t>(num_tasks) << kTaskBits) |
         static_cast<uint64_t>(next);
}
uint32_t GenOf(uint64_t s) { return static_cast<uint32_t>(s >> (2 * kTaskBits)); }
int NumOf(uint64_t s) { return static_cast<int>((s >> kTaskBits) & kTaskMask); }
int NextOf(uint64_t s) { return static_cast<int>(s & kTaskMask); }

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Set while this thread runs a task of some pool: a ParallelFor from inside runs inline.
thread_local bool t_in_task = false;

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  const int workers = (num_threads < 1 ? 1 : num_threads) - 1;
  workers_.reserve(workers);
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  epoch_.fetch_add(1, std::memory_order_seq_cst);  // a value no worker has seen: wakes spinners
  epoch_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Run(int num_tasks, TaskFn fn, void* ctx) {
  if (num_tasks <= 0) return;
  auto inline_all = [&] {
    for (int t = 0; t < num_tasks; ++t) fn(ctx, t);
  };
  if (num_tasks == 1 || workers_.empty() || t_in_task) return inline_all();
  std::unique_lock<std::mutex> lock(run_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return inline_all();  // another thread's loop holds the pool

  fn_ = fn;
  ctx_ = ctx;
  done_.store(0, std::memory_order_relaxed);
  gen_ = (gen_ + 1) & kGenMask;
  if (gen_ == 0) gen_ = 1;
  state_.store(Pack(gen_, num_tasks, 0), std::memory_order_seq_cst);
  epoch_.store(gen_, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) epoch_.notify_all();

  t_in_task = true;
  Drain(gen_);
  t_in_task = false;
  // The workers' tasks: the caller never depends on a worker having woken (it took what was left).
  for (int spins = 0; done_.load(std::memory_order_acquire) < num_tasks; ++spins) {
    if (spins < 20000) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::Drain(uint32_t gen) {
  for (;;) {
    uint64_t s = state_.load(std::memory_order_acquire);
    do {
      if (GenOf(s) != gen || NextOf(s) >= NumOf(s)) return;
    } while (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                           std::memory_order_acquire));
    // The loop cannot end (nor fn_ change) before this claimed task is counted done.
    fn_(ctx_, NextOf(s));
    done_.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::WorkerLoop() {
  using Clock = std::chrono::steady_clock;
  uint32_t seen = 0;
  for (;;) {
    uint32_t e = epoch_.load(std::memory_order_acquire);
    if (e == seen) {
      const auto until = Clock::now() + std::chrono::microseconds(kSpinMicros);
      for (int i = 1; e == seen; ++i) {
        CpuRelax();
        e = epoch_.load(std::memory_order_acquire);
        if (i % 64 == 0 && Clock::now() > until) break;
      }
      if (e == seen) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        if (epoch_.load(std::memory_order_seq_cst) == seen) epoch_.wait(seen, std::memory_order_seq_cst);
        sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        continue;
      }
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = e;
    t_in_task = true;
    Drain(e & kGenMask);
    t_in_task = false;
  }
}

void SpinUntilAtLeast(const std::atomic<int>& v, int target) {
  for (int spins = 0; v.load(std::memory_order_acquire) < target; ++spins) {
    if (spins < 20000) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
}

namespace {
std::mutex g_pool_mu;
std::shared_ptr<ThreadPool>& PoolSlot() {
  static auto* slot = new std::shared_ptr<ThreadPool>();  // never destroyed: no join at exit
  return *slot;
}
}  // namespace

std::shared_ptr<ThreadPool> CpuPool() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  std::shared_ptr<ThreadPool>& slot = PoolSlot();
  if (!slot) slot = std::make_shared<ThreadPool>(UsableCores());
  return slot;
}

void SetCpuPoolThreads(int n) {
  if (n < 1) n = 1;
  std::shared_ptr<ThreadPool> old;
  {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    std::shared_ptr<ThreadPool>& slot = PoolSlot();
    if (slot && slot->num_threads() == n) return;
    old = std::move(slot);
    slot = std::make_shared<ThreadPool>(n);
  }
  // `old` joins its workers here, or later in the last thread still running a loop on it.
}

}  // namespace tandem::cpu
