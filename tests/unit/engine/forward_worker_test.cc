// ForwardWorker (engine/forward_worker.h): every submitted job runs once, on the worker's thread,
// and Wait returns only after it did, whether the hand-offs sleep (spin 0) or poll first.
#include "engine/forward_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace tandem {
namespace {

class ForwardWorkerSpin : public ::testing::TestWithParam<int> {};  // spin, microseconds

TEST_P(ForwardWorkerSpin, EveryJobRunsOnceOnTheWorkerBeforeWaitReturns) {
  ForwardWorker w;
  const auto spin = std::chrono::microseconds(GetParam());
  w.set_spin(spin);
  // Past the spin: every 500th job outlasts it (Wait sleeps on the condition variable), and every
  // 500th Submit comes after it (the worker sleeps first).
  const auto past_spin = spin + std::chrono::milliseconds(3);
  w.Wait();  // nothing submitted: returns at once
  EXPECT_FALSE(w.pending());
  int value = 0;  // written by the worker only, read here after Wait: no atomics needed
  std::thread::id worker_id;
  for (int i = 0; i < 2000; ++i) {
    if (i % 500 == 250) std::this_thread::sleep_for(past_spin);
    w.Submit([&value, &worker_id, i, past_spin] {
      if (i % 500 == 0) std::this_thread::sleep_for(past_spin);
      ++value;
      worker_id = std::this_thread::get_id();
    });
    w.Wait();
    ASSERT_EQ(value, i + 1);
    ASSERT_FALSE(w.pending());
    ASSERT_NE(worker_id, std::this_thread::get_id());
  }
}

TEST_P(ForwardWorkerSpin, DestructorWaitsForTheJobInFlight) {
  std::atomic<bool> done{false};
  {
    ForwardWorker w;
    w.set_spin(std::chrono::microseconds(GetParam()));
    w.Submit([&done] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      done = true;
    });
    EXPECT_TRUE(w.pending());
  }
  EXPECT_TRUE(done);
}

INSTANTIATE_TEST_SUITE_P(Spin, ForwardWorkerSpin, ::testing::Values(0, 1000, 20000));

}  // namespace
}  // namespace tandem
