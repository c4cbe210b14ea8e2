// The overlapped engine loop (EngineConfig::async_scheduling, engine/engine_overlap.cc) against
// the synchronous one, on the real CPU runner and the bundled tiny Qwen3 with its tokenizer. A
// random workload (seeded): prompts of 3-90 tokens arriving over many steps, greedy and seeded
// sampling, penalties, log-probabilities, max_tokens from 1, stop strings and stop token ids
// taken from each request's own output so that they fire mid-generation, ignore_eos, and aborts
// once a request has K tokens. Every request must end with the same tokens, text, log-probability
// tokens and finish reason in both loops, and every KV block must be back in the pool. And the
// overlapped loop must really overlap: with the forward pass held at a gate, Step() returns, and
// the next Step() waits for that pass.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "model/forwarding_model_runner.h"
#include "tokenizer/tokenizer.h"

namespace tandem {
namespace {

using testing::Absorb;
using testing::Collected;

// A gate the forward pass waits at (open: it never waits).
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = true;
  void Set(bool o) {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = o;
    }
    cv.notify_all();
  }
  void Pass() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return open; });
  }
};

// The real runner, with a flag that is set while Execute runs, and a gate in front of it.
class WatchedRunner final : public ForwardingModelRunner {
 public:
  WatchedRunner(std::unique_ptr<ModelRunner> inner, std::atomic<bool>* executing, Gate* gate = nullptr)
      : ForwardingModelRunner(std::move(inner)), executing_(executing), gate_(gate) {}
  Status Execute(const ForwardBatch& batch, ForwardOutput* out) override {
    executing_->store(true);
    if (gate_ != nullptr) gate_->Pass();
    Status st = inner().Execute(batch, out);
    executing_->store(false);
    return st;
  }

 private:
  std::atomic<bool>* executing_;
  Gate* gate_;
};

struct Req {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
  int arrive_step = 0;
  int abort_at_tokens = -1;  // abort once it has this many tokens (-1: never)
};

struct WorkloadRun {
  std::map<std::string, Collected> got;
  int steps = 0;
  int blocks_used_after = -1;
};

std::shared_ptr<const Tokenizer> LoadTokenizer() {
  auto t = Tokenizer::Load(DefaultModelDir());
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : nullptr;
}

WorkloadRun RunWorkload(const std::vector<Req>& reqs, bool overlap, std::shared_ptr<const Tokenizer> tokenizer) {
  WorkloadRun run;
  std::atomic<bool> executing{false};
  auto inner = LoadCpuModelRunner(DefaultModelDir());
  EXPECT_TRUE(inner.ok()) << inner.status().ToString();
  if (!inner.ok()) return run;
  EngineConfig c;
  c.block_size = 16;
  c.num_kv_blocks = 96;  // small: later requests wait, some are preempted
  c.max_num_seqs = 12;
  c.max_num_batched_tokens = 96;  // long prompts are chunked
  c.async_scheduling = overlap;
  auto engine = Engine::Create(std::make_unique<WatchedRunner>(std::move(inner).value(), &executing),
                               std::move(tokenizer), c);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return run;
  Engine& e = **engine;
  std::map<std::string, bool> aborted;
  size_t added = 0;
  for (int step = 0; step < 20000; ++step) {
    for (const Req& r : reqs) {
      if (r.arrive_step != step) continue;
      EXPECT_TRUE(e.AddRequest(r.id, r.prompt, r.params).ok()) << r.id;
      ++added;
    }
    if (added == reqs.size() && !e.HasUnfinishedRequests()) break;
    Absorb(run.got, e.Step());
    ++run.steps;
    for (const Req& r : reqs) {
      if (r.abort_at_tokens < 0 || aborted[r.id]) continue;
      auto it = run.got.find(r.id);
      if (it == run.got.end() || it->second.finish_reason != FinishReason::kNone) continue;
      if (static_cast<int>(it->second.token_ids.size()) < r.abort_at_tokens) continue;
      aborted[r.id] = true;
      e.AbortRequest(r.id);
    }
  }
  // The aborts' outputs come with the next step.
  while (e.HasUnfinishedRequests()) Absorb(run.got, e.Step());
  EXPECT_FALSE(e.HasUnfinishedRequests());
  run.blocks_used_after = e.Stats().num_kv_blocks_used;
  return run;
}

// The workload, with stop strings and stop ids cut from the requests' own outputs of a first
// synchronous run without them.
std::vector<Req> MakeWorkload(uint64_t seed, std::shared_ptr<const Tokenizer> tokenizer) {
  std::mt19937_64 rng(seed);
  auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<Req> reqs;
  for (int i = 0; i < 28; ++i) {
    Req r;
    r.id = "r" + std::to_string(i);
    const int len = uniform(3, 90);
    for (int t = 0; t < len; ++t) r.prompt.push_back(uniform(200, 20000));
    SamplingParams& p = r.params;
    p.max_tokens = uniform(0, 5) == 0 ? uniform(1, 3) : uniform(4, 40);
    p.ignore_eos = uniform(0, 3) == 0;
    if (uniform(0, 2) == 0) {  // seeded sampling
      p.temperature = 0.9f;
      p.top_p = 0.9f;
      p.seed = 1000 + i;
    } else {
      p.temperature = 0.0f;
    }
    if (uniform(0, 4) == 0) p.repetition_penalty = 1.3f;
    if (uniform(0, 5) == 0) p.presence_penalty = 0.5f;
    if (uniform(0, 3) == 0) p.logprobs = 2;
    r.arrive_step = uniform(0, 3) == 0 ? 0 : uniform(0, 60);
    reqs.push_back(std::move(r));
  }
  // A first run: what each request writes, then stops that cut it short.
  const WorkloadRun first = RunWorkload(reqs, /*overlap=*/false, tokenizer);
  for (size_t i = 0; i < reqs.size(); ++i) {
    Req& r = reqs[i];
    const Collected& c = first.got.at(r.id);
    const int kind = uniform(0, 5);
    if (kind == 0 && c.text.size() > 6) {  // a stop string from the middle of its text
      const size_t at = static_cast<size_t>(uniform(2, static_cast<int>(c.text.size()) - 3));
      r.params.stop = {c.text.substr(at, 3)};
    } else if (kind == 1 && c.token_ids.size() > 3) {  // a stop id it writes
      r.params.stop_token_ids = {c.token_ids[static_cast<size_t>(uniform(1, static_cast<int>(c.token_ids.size()) - 1))]};
    } else if (kind == 2 && c.token_ids.size() > 2) {
      r.abort_at_tokens = uniform(1, static_cast<int>(c.token_ids.size()) - 1);
    }
  }
  return reqs;
}

void ExpectSameOutputs(const std::vector<Req>& reqs, const WorkloadRun& sync, const WorkloadRun& overlap) {
  int stopped_by_string = 0, aborted = 0, stopped = 0;
  for (const Req& r : reqs) {
    SCOPED_TRACE(r.id);
    ASSERT_TRUE(sync.got.count(r.id));
    ASSERT_TRUE(overlap.got.count(r.id));
    const Collected& a = sync.got.at(r.id);
    const Collected& b = overlap.got.at(r.id);
    EXPECT_EQ(a.token_ids, b.token_ids);
    EXPECT_EQ(a.text, b.text);
    EXPECT_EQ(a.finish_reason, b.finish_reason);
    EXPECT_EQ(a.error, b.error);
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
    for (size_t i = 0; i < a.logprobs.size(); ++i) {
      EXPECT_EQ(a.logprobs[i].token_id, b.logprobs[i].token_id);
      EXPECT_NEAR(a.logprobs[i].logprob, b.logprobs[i].logprob, 1e-5);
    }
    aborted += a.finish_reason == FinishReason::kAbort;
    stopped += a.finish_reason == FinishReason::kStop;
    stopped_by_string += !r.params.stop.empty() && a.finish_reason == FinishReason::kStop;
  }
  // The workload did what it is for (else the comparison proves little).
  EXPECT_GT(aborted, 0);
  EXPECT_GT(stopped_by_string, 0);
  EXPECT_GT(stopped, aborted / 2);
}

class EngineOverlap : public ::testing::TestWithParam<uint64_t> {};

TEST_P(EngineOverlap, SameOutputsAsTheSynchronousLoop) {
  auto tokenizer = LoadTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<Req> reqs = MakeWorkload(GetParam(), tokenizer);
  const WorkloadRun sync = RunWorkload(reqs, /*overlap=*/false, tokenizer);
  const WorkloadRun overlap = RunWorkload(reqs, /*overlap=*/true, tokenizer);
  ExpectSameOutputs(reqs, sync, overlap);
  EXPECT_EQ(sync.blocks_used_after, 0);
  EXPECT_EQ(overlap.blocks_used_after, 0);
}

INSTANTIATE_TEST_SUITE_P(Seeds, EngineOverlap, ::testing::Values(1u, 2u, 3u));

// Without a tokenizer (token ids only) and with every request greedy to its length: the same ids.
TEST(EngineOverlapIds, GreedyWithoutTokenizer) {
  std::vector<Req> reqs;
  for (int i = 0; i < 10; ++i) {
    Req r;
    r.id = "g" + std::to_string(i);
    for (int t = 0; t < 20 + 7 * i; ++t) r.prompt.push_back(300 + (i * 131 + t * 17) % 9000);
    r.params = testing::Greedy(5 + 3 * i);
    r.params.ignore_eos = true;
    r.arrive_step = i % 3;
    reqs.push_back(std::move(r));
  }
  const WorkloadRun sync = RunWorkload(reqs, false, nullptr);
  const WorkloadRun overlap = RunWorkload(reqs, true, nullptr);
  for (const Req& r : reqs) {
    EXPECT_EQ(sync.got.at(r.id).token_ids, overlap.got.at(r.id).token_ids) << r.id;
    EXPECT_EQ(static_cast<int>(overlap.got.at(r.id).token_ids.size()), r.params.max_tokens) << r.id;
    EXPECT_EQ(overlap.got.at(r.id).finish_reason, FinishReason::kLength) << r.id;
  }
  EXPECT_EQ(overlap.blocks_used_after, 0);
}

// The overlap itself: the forward pass of the first step waits at a closed gate, yet Step()
// returns (the engine thread is free while it runs); the next Step() needs that pass's tokens and
// waits until the gate opens. Then the request runs to its length as usual.
TEST(EngineOverlapGate, StepReturnsWhileTheForwardPassRuns) {
  std::atomic<bool> executing{false};
  Gate gate;
  auto inner = LoadCpuModelRunner(DefaultModelDir());
  ASSERT_TRUE(inner.ok()) << inner.status().ToString();
  EngineConfig c;
  c.num_kv_blocks = 64;
  c.async_scheduling = true;
  auto engine = Engine::Create(std::make_unique<WatchedRunner>(std::move(inner).value(), &executing, &gate),
                               nullptr, c);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  Engine& e = **engine;
  std::vector<int32_t> prompt;
  for (int t = 0; t < 40; ++t) prompt.push_back(500 + 37 * t);
  SamplingParams p = testing::Greedy(6);
  p.ignore_eos = true;
  ASSERT_TRUE(e.AddRequest("a", prompt, p).ok());
  gate.Set(false);
  std::map<std::string, Collected> got;
  Absorb(got, e.Step());  // launches the prefill and returns while it waits at the gate
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!executing.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(executing.load()) << "the forward pass did not start";
  EXPECT_TRUE(got.empty());
  auto next = std::async(std::launch::async, [&e] { return e.Step(); });
  EXPECT_EQ(next.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
      << "the next Step() did not wait for the forward pass";
  gate.Set(true);
  Absorb(got, next.get());
  ASSERT_EQ(got["a"].token_ids.size(), 1u);  // the first token, from the collected prefill
  got = testing::RunToCompletion(e, std::move(got));
  EXPECT_EQ(got["a"].token_ids.size(), 6u);
  EXPECT_EQ(got["a"].finish_reason, FinishReason::kLength);
  EXPECT_EQ(e.Stats().num_kv_blocks_used, 0);
}

}  // namespace
}  // namespace tandem
