// cpu::ThreadPool: every task runs exactly once per loop; loops back to back (workers spinning),
// after the workers slept, nested inside a task and from two threads at once; the global pool's size.
#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace tandem::cpu {
namespace {

void ExpectEachOnce(ThreadPool& pool, int num_tasks) {
  std::vector<std::atomic<int>> hits(num_tasks);
  pool.ParallelFor(num_tasks, [&](int t) { hits[t].fetch_add(1); });
  for (int t = 0; t < num_tasks; ++t) ASSERT_EQ(hits[t].load(), 1) << "task " << t << " of " << num_tasks;
}

TEST(ThreadPool, EveryTaskOnceBackToBackAndAfterSleeping) {
  for (const int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int round = 0; round < 2000; ++round) ExpectEachOnce(pool, 1 + round % 37);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin: workers sleep
    ExpectEachOnce(pool, 100);
    ExpectEachOnce(pool, 0);
  }
}

TEST(ThreadPool, WorkersTakeTasks) {
  ThreadPool pool(3);
  std::mutex mu;
  std::vector<std::thread::id> ids;
  // Tasks long enough that the workers (spinning or woken) join in.
  for (int round = 0; round < 20 && ids.size() < 2; ++round) {
    pool.ParallelFor(64, [&](int) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::lock_guard<std::mutex> lock(mu);
      if (std::find(ids.begin(), ids.end(), std::this_thread::get_id()) == ids.end()) {
        ids.push_back(std::this_thread::get_id());
      }
    });
  }
  EXPECT_GE(ids.size(), 2u);
}

TEST(ThreadPool, NestedAndConcurrentLoopsRunInline) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.ParallelFor(8, [&](int) { pool.ParallelFor(5, [&](int) { inner.fetch_add(1); }); });
  EXPECT_EQ(inner.load(), 40);

  std::atomic<long> total{0};
  auto caller = [&] {
    for (int r = 0; r < 500; ++r) pool.ParallelFor(16, [&](int t) { total.fetch_add(t + 1); });
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 2L * 500 * (16 * 17 / 2));
}

TEST(ThreadPool, GlobalPoolResized) {
  const int before = CpuPool()->num_threads();
  EXPECT_GE(before, 1);
  SetCpuPoolThreads(3);
  EXPECT_EQ(CpuPool()->num_threads(), 3);
  std::shared_ptr<ThreadPool> held = CpuPool();
  SetCpuPoolThreads(1);  // the held pool stays usable
  ExpectEachOnce(*held, 10);
  EXPECT_EQ(CpuPool()->num_threads(), 1);
  SetCpuPoolThreads(before);
}

}  // namespace
}  // namespace tandem::cpu
