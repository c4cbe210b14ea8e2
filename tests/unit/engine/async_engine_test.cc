// AsyncEngine: the engine on its own thread behind EngineClient. Outputs from many submitting
// threads equal the plain engine's; cancel ends a request within a step and frees its blocks;
// the waiting queue bound answers ResourceExhausted; validation errors are synchronous.
#include "engine/async_engine.h"

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "engine_test_util.h"
#include "fake_model_runner.h"

namespace tandem {
namespace {

using namespace std::chrono_literals;

// Long enough a context that an ignore_eos request is still running when a test cancels it.
std::unique_ptr<Engine> MakeFakeEngine(int num_blocks = 1 << 16, int max_num_seqs = 8) {
  EngineConfig config;
  config.num_kv_blocks = num_blocks;
  config.block_size = 4;
  config.max_num_seqs = max_num_seqs;
  config.max_num_batched_tokens = 64;
  auto engine = Engine::Create(std::make_unique<testing::FakeModelRunner>(512, 1 << 18), nullptr, config);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return std::move(engine).value();
}

// Collects one request's outputs; Wait() returns once the final output arrived.
struct Sink {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
  int num_finals = 0;
  OutputCallback Callback() {
    return [this](RequestOutput out) {
      std::lock_guard<std::mutex> lock(mu);
      tokens.insert(tokens.end(), out.new_token_ids.begin(), out.new_token_ids.end());
      if (out.finished) {
        reason = out.finish_reason;
        ++num_finals;
        cv.notify_all();
      }
    };
  }
  bool Wait(std::chrono::milliseconds timeout = 10s) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [&] { return num_finals > 0; });
  }
};

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * 31 + salt * 17) % 500 + 1;
  return p;
}

TEST(AsyncEngine, ManyThreadsGetTheSameTokensAsThePlainEngine) {
  constexpr int kRequests = 24;
  // Reference: the plain engine, all at once.
  auto plain = MakeFakeEngine();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(plain->AddRequest("r" + std::to_string(i), Prompt(5 + i, i), testing::Greedy(12)).ok());
  }
  auto want = testing::RunToCompletion(*plain);

  AsyncEngine async(MakeFakeEngine(), {"fake", 1000});
  std::vector<Sink> sinks(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      GenerateRequest r{"r" + std::to_string(i), Prompt(5 + i, i), testing::Greedy(12)};
      EXPECT_TRUE(async.Submit(std::move(r), sinks[i].Callback()).ok());
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(sinks[i].Wait()) << i;
    EXPECT_EQ(sinks[i].tokens, want["r" + std::to_string(i)].token_ids) << i;
    EXPECT_EQ(sinks[i].reason, FinishReason::kLength);
    EXPECT_EQ(sinks[i].num_finals, 1);
  }
  // Stats are refreshed after each step; give the thread a moment to publish the last.
  for (int i = 0; i < 100 && async.Stats().num_pending > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(async.Stats().num_pending, 0);
  EXPECT_EQ(async.Stats().engine.num_kv_blocks_used, 0);
}

TEST(AsyncEngine, CancelEndsARequestAndFreesItsBlocks) {
  AsyncEngine async(MakeFakeEngine(), {"fake", 100});
  Sink sink;
  SamplingParams p = testing::Greedy(1000000);
  p.ignore_eos = true;
  ASSERT_TRUE(async.Submit({"long", Prompt(8, 1), p}, sink.Callback()).ok());
  // Let it generate a while, then cancel.
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard<std::mutex> lock(sink.mu);
      if (sink.tokens.size() >= 5) break;
    }
    std::this_thread::sleep_for(5ms);
  }
  async.Cancel("long");
  ASSERT_TRUE(sink.Wait(5s));
  EXPECT_EQ(sink.reason, FinishReason::kAbort);
  for (int i = 0; i < 100 && async.Stats().engine.num_kv_blocks_used > 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(async.Stats().engine.num_kv_blocks_used, 0);
  EXPECT_EQ(async.Stats().num_pending, 0);
  async.Cancel("long");       // unknown by now: ignored
  async.Cancel("never-was");  // ignored
}

TEST(AsyncEngine, ValidationErrorsAreSynchronous) {
  AsyncEngine async(MakeFakeEngine(/*num_blocks=*/4), {"fake", 100});
  Sink sink;
  Status empty = async.Submit({"e", {}, testing::Greedy(4)}, sink.Callback());
  EXPECT_EQ(empty.code(), StatusCode::kInvalidArgument);
  Status too_big = async.Submit({"b", Prompt(100, 1), testing::Greedy(4)}, sink.Callback());
  EXPECT_EQ(too_big.code(), StatusCode::kInvalidArgument) << too_big.ToString();
  Status bad_token = async.Submit({"t", {1, 2, 99999}, testing::Greedy(4)}, sink.Callback());
  EXPECT_EQ(bad_token.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sink.num_finals, 0);  // no callback follows a synchronous error
  EXPECT_EQ(async.model_info().name, "fake");
}

TEST(AsyncEngine, FullWaitingQueueAnswersResourceExhausted) {
  // One running request at a time; the queue holds two more.
  AsyncEngine async(MakeFakeEngine(1 << 16, /*max_num_seqs=*/1), {"fake", 2});
  SamplingParams p = testing::Greedy(1000000);
  p.ignore_eos = true;
  std::vector<Sink> sinks(8);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 8; ++i) {
    Status st = async.Submit({"q" + std::to_string(i), Prompt(4, i), p}, sinks[i].Callback());
    if (st.ok()) ++accepted;
    else {
      EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
      ++refused;
    }
  }
  // A burst: 1 running slot + 2 waiting, whatever the engine thread admitted meanwhile.
  EXPECT_EQ(accepted, 3);
  EXPECT_EQ(refused, 5);
  for (int i = 0; i < 8; ++i) async.Cancel("q" + std::to_string(i));
  for (int i = 0; i < 8; ++i) {
    if (i < accepted) {
      EXPECT_TRUE(sinks[i].Wait(5s)) << i;
    }
  }
}

TEST(AsyncEngine, DestructionAbortsUnfinishedRequests) {
  Sink sink;
  {
    AsyncEngine async(MakeFakeEngine(), {"fake", 100});
    SamplingParams p = testing::Greedy(1000000);
    p.ignore_eos = true;
    ASSERT_TRUE(async.Submit({"x", Prompt(4, 2), p}, sink.Callback()).ok());
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(sink.num_finals, 1);
  EXPECT_EQ(sink.reason, FinishReason::kAbort);
}

// An engine that sends prompts of more than 8 uncached tokens to a remote prefill.
Result<std::unique_ptr<Engine>> MakeRemotePrefillEngine() {
  EngineConfig config;
  config.num_kv_blocks = 1024;
  config.block_size = 4;
  config.max_num_batched_tokens = 64;
  config.max_local_prefill_tokens = 8;
  return Engine::Create(std::make_unique<testing::FakeModelRunner>(512, 1 << 18), nullptr, config);
}

// Remote prefill through AsyncEngineOptions::remote_prefill: a failed outcome falls back to local
// prefill; a request cancelled while its remote prefill is out keeps its blocks until the outcome
// arrives (a prefill worker may still be writing into them), then ends with kAbort.
TEST(AsyncEngine, RemotePrefillOutcomesAndDeferredCancel) {
  auto engine = MakeRemotePrefillEngine();
  ASSERT_TRUE(engine.ok());
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<RemotePrefillTask, std::function<void(RemotePrefillOutcome)>>> calls;
  AsyncEngineOptions options;
  options.remote_prefill = [&](RemotePrefillTask task, std::function<void(RemotePrefillOutcome)> done) {
    std::lock_guard<std::mutex> lock(mu);
    calls.emplace_back(std::move(task), std::move(done));
    cv.notify_all();
  };
  AsyncEngine async(std::move(engine).value(), options);
  auto wait_calls = [&](size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 10s, [&] { return calls.size() >= n; });
  };

  // A short prompt is prefilled here: no call.
  Sink short_sink;
  GenerateRequest s{"short", Prompt(6, 1), testing::Greedy(3)};
  ASSERT_TRUE(async.Submit(s, short_sink.Callback()).ok());
  ASSERT_TRUE(short_sink.Wait());
  EXPECT_EQ(short_sink.tokens.size(), 3u);

  // A long prompt goes out; a failed outcome means local prefill, same tokens as a plain engine.
  Sink failed;
  ASSERT_TRUE(async.Submit({"long", Prompt(40, 2), testing::Greedy(5)}, failed.Callback()).ok());
  ASSERT_TRUE(wait_calls(1));
  EXPECT_EQ(calls[0].first.request_id, "long");
  EXPECT_EQ(calls[0].first.block_ids.size(), 10u);  // 40 tokens / 4
  calls[0].second(RemotePrefillOutcome{Status(StatusCode::kFailedPrecondition, "prefill died"), -1, {}});
  ASSERT_TRUE(failed.Wait());
  auto plain = MakeFakeEngine();
  ASSERT_TRUE(plain->AddRequest("long", Prompt(40, 2), testing::Greedy(5)).ok());
  auto ref = testing::RunToCompletion(*plain);
  EXPECT_EQ(failed.tokens, ref["long"].token_ids);

  // Cancelled while out: nothing ends and the blocks stay until the outcome comes.
  Sink cancelled;
  ASSERT_TRUE(async.Submit({"gone", Prompt(40, 3), testing::Greedy(5)}, cancelled.Callback()).ok());
  ASSERT_TRUE(wait_calls(2));
  async.Cancel("gone");
  EXPECT_FALSE(cancelled.Wait(300ms));
  EXPECT_EQ(async.Stats().engine.num_kv_blocks_used, 10);
  calls[1].second(RemotePrefillOutcome{Status::Ok(), 7, {}});
  ASSERT_TRUE(cancelled.Wait());
  EXPECT_EQ(cancelled.reason, FinishReason::kAbort);
  for (int i = 0; i < 100 && async.Stats().engine.num_kv_blocks_used != 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(async.Stats().engine.num_kv_blocks_used, 0);
}

// A remote prefill's outcome and a cancel handled in the same loop iteration (found by
// tests/chaos/chaos.py: a decode worker aborted with std::bad_function_call): the first token and
// the abort are two outputs of one request in one Step; both reach the callback, the abort last,
// and the blocks go back.
TEST(AsyncEngine, ARemotePrefillsFirstTokenAndItsCancelInOneIteration) {
  auto engine = MakeRemotePrefillEngine();
  ASSERT_TRUE(engine.ok());
  AsyncEngine* self = nullptr;
  AsyncEngineOptions options;
  // On the engine thread, outside its lock: the outcome and the cancel are both queued before the
  // thread looks at its inboxes again.
  options.remote_prefill = [&](RemotePrefillTask task, std::function<void(RemotePrefillOutcome)> done) {
    done(RemotePrefillOutcome{Status::Ok(), 7, {}});
    self->Cancel(task.request_id);
  };
  AsyncEngine async(std::move(engine).value(), options);
  self = &async;
  Sink sink;
  std::vector<bool> finished;
  std::mutex mu;
  OutputCallback inner = sink.Callback();
  ASSERT_TRUE(async.Submit({"race", Prompt(40, 4), testing::Greedy(5)}, [&](RequestOutput out) {
                     {
                       std::lock_guard<std::mutex> lock(mu);
                       finished.push_back(out.finished);
                     }
                     inner(std::move(out));
                   }).ok());
  ASSERT_TRUE(sink.Wait());
  EXPECT_EQ(sink.reason, FinishReason::kAbort);
  EXPECT_EQ(sink.num_finals, 1);
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(finished.size(), 2u);  // the first token (7), then the abort
    EXPECT_FALSE(finished[0]);
    EXPECT_TRUE(finished[1]);
  }
  EXPECT_EQ(sink.tokens, std::vector<int32_t>{7});
  for (int i = 0; i < 100 && async.Stats().engine.num_kv_blocks_used != 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(async.Stats().engine.num_kv_blocks_used, 0);
}

}  // namespace
}  // namespace tandem
