// Disaggregated prefill/decode at the engine level (DESIGN.md section 1), two engines in one
// process with the KV copied between their pools: tokens equal aggregated serving (greedy and
// seeded), only the blocks decode lacks are copied, short or cached prompts stay local, a failed
// remote prefill falls back to local prefill, and blocks return to baseline on both sides.
#include <memory>

#include <gtest/gtest.h>

#include "disagg_test_util.h"
#include "engine_test_util.h"
#include "fake_model_runner.h"

namespace tandem {
namespace {

using testing::DisaggCounters;
using testing::FakeModelRunner;
using testing::Greedy;
using testing::RunDisaggregated;
using testing::RunToCompletion;

constexpr int kBlock = 4;

struct Pair {
  FakeModelRunner* decode_runner = nullptr;
  FakeModelRunner* prefill_runner = nullptr;
  std::unique_ptr<Engine> decode, prefill;
};

std::unique_ptr<Engine> Make(FakeModelRunner** runner_out, int max_local, int budget = 64) {
  auto runner = std::make_unique<FakeModelRunner>();
  *runner_out = runner.get();
  EngineConfig c;
  c.block_size = kBlock;
  c.num_kv_blocks = 256;
  c.max_num_batched_tokens = budget;
  c.max_local_prefill_tokens = max_local;
  auto e = Engine::Create(std::move(runner), nullptr, c);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

Pair MakePair(int max_local) {
  Pair p;
  p.decode = Make(&p.decode_runner, max_local);
  p.prefill = Make(&p.prefill_runner, 0, /*budget=*/7);  // chunked prefill on the prefill side
  return p;
}

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = (i * 13 + salt * 7) % 400 + 1;
  return v;
}

RequestOptions Remote() {
  RequestOptions o;
  o.allow_remote_prefill = true;
  return o;
}

TEST(DisaggEngine, GreedyTokensEqualAggregated) {
  FakeModelRunner* agg_runner;
  auto agg = Make(&agg_runner, 0);
  Pair p = MakePair(/*max_local=*/8);
  const int lengths[] = {3, 8, 9, 16, 17, 31};  // at/under the threshold stays local
  for (int i = 0; i < 6; ++i) {
    const std::string id = "r" + std::to_string(i);
    ASSERT_TRUE(agg->AddRequest(id, Prompt(lengths[i], i), Greedy(10)).ok());
    ASSERT_TRUE(p.decode->AddRequest(id, Prompt(lengths[i], i), Greedy(10), Remote()).ok());
  }
  auto want = RunToCompletion(*agg);
  DisaggCounters counters;
  auto got = RunDisaggregated(*p.decode, *p.decode_runner, *p.prefill, *p.prefill_runner, kBlock,
                              &counters);
  for (int i = 0; i < 6; ++i) {
    const std::string id = "r" + std::to_string(i);
    EXPECT_EQ(got[id].token_ids, want[id].token_ids) << id;
    EXPECT_EQ(got[id].finish_reason, FinishReason::kLength) << id;
  }
  EXPECT_EQ(counters.num_transfers, 4);  // lengths 9, 16, 17, 31
  EXPECT_TRUE(p.decode_runner->errors.empty()) << p.decode_runner->errors.front();
  EXPECT_EQ(p.decode->Stats().num_kv_blocks_used, 0);
  EXPECT_EQ(p.prefill->Stats().num_kv_blocks_used, 0);
}

TEST(DisaggEngine, SeededSamplingEqualsAggregated) {
  FakeModelRunner* agg_runner;
  auto agg = Make(&agg_runner, 0);
  Pair p = MakePair(0);
  SamplingParams s;
  s.temperature = 0.9f;
  s.top_p = 0.95f;
  s.seed = 1234;
  s.max_tokens = 12;
  ASSERT_TRUE(agg->AddRequest("s", Prompt(21, 5), s).ok());
  ASSERT_TRUE(p.decode->AddRequest("s", Prompt(21, 5), s, Remote()).ok());
  auto want = RunToCompletion(*agg);
  DisaggCounters counters;
  auto got = RunDisaggregated(*p.decode, *p.decode_runner, *p.prefill, *p.prefill_runner, kBlock,
                              &counters);
  EXPECT_EQ(counters.num_transfers, 1);
  EXPECT_EQ(got["s"].token_ids, want["s"].token_ids);
}

TEST(DisaggEngine, SecondTurnCopiesOnlyNewBlocksAndRepeatCopiesNothing) {
  // A repeated prompt still computes its last token (its last block is never a prefix-cache hit,
  // as in vLLM): with max_local_prefill_tokens >= block_size such a prompt stays local.
  Pair p = MakePair(/*max_local=*/kBlock);
  const auto turn1 = Prompt(20, 9);  // 5 full blocks
  ASSERT_TRUE(p.decode->AddRequest("t1", turn1, Greedy(6), Remote()).ok());
  DisaggCounters c1;
  auto got1 = RunDisaggregated(*p.decode, *p.decode_runner, *p.prefill, *p.prefill_runner, kBlock,
                               &c1);
  EXPECT_EQ(c1.num_blocks_copied, 5);

  // Turn 2 resends the history plus new text. Decode has turn 1's KV cached: its prompt and the
  // tokens it decoded (all but the last output token), i.e. (20 + 6 - 1) / 4 = 6 full blocks.
  auto turn2 = turn1;
  turn2.insert(turn2.end(), got1["t1"].token_ids.begin(), got1["t1"].token_ids.end());
  for (int i = 0; i < 10; ++i) turn2.push_back(300 + i);  // 36 tokens = 9 blocks
  ASSERT_TRUE(p.decode->AddRequest("t2", turn2, Greedy(6), Remote()).ok());
  DisaggCounters c2;
  RunDisaggregated(*p.decode, *p.decode_runner, *p.prefill, *p.prefill_runner, kBlock, &c2);
  EXPECT_EQ(c2.num_transfers, 1);
  EXPECT_EQ(c2.num_blocks_copied, 9 - 6);  // only what decode lacks
  EXPECT_EQ(c2.bytes_copied, c2.num_blocks_copied * static_cast<int64_t>(
                                 p.decode_runner->kv_cache_layout().block_bytes));

  // The same prompt again: all but its last token is cached on decode: prefilled locally.
  ASSERT_TRUE(p.decode->AddRequest("t3", turn2, Greedy(6), Remote()).ok());
  DisaggCounters c3;
  RunDisaggregated(*p.decode, *p.decode_runner, *p.prefill, *p.prefill_runner, kBlock, &c3);
  EXPECT_EQ(c3.num_transfers, 0);
  EXPECT_EQ(c3.bytes_copied, 0);
  EXPECT_TRUE(p.decode_runner->errors.empty()) << p.decode_runner->errors.front();
}

TEST(DisaggEngine, FailedRemotePrefillFallsBackToLocal) {
  FakeModelRunner* agg_runner;
  auto agg = Make(&agg_runner, 0);
  Pair p = MakePair(0);
  ASSERT_TRUE(agg->AddRequest("f", Prompt(19, 3), Greedy(8)).ok());
  ASSERT_TRUE(p.decode->AddRequest("f", Prompt(19, 3), Greedy(8), Remote()).ok());
  auto want = RunToCompletion(*agg);
  DisaggCounters counters;
  auto got = RunDisaggregated(*p.decode, *p.decode_runner, *p.prefill, *p.prefill_runner, kBlock,
                              &counters, /*fail_remote=*/true);
  EXPECT_EQ(counters.num_transfers, 0);
  EXPECT_EQ(got["f"].token_ids, want["f"].token_ids);
  EXPECT_EQ(p.decode->Stats().num_kv_blocks_used, 0);
}

TEST(DisaggEngine, AbortWhileAwaitingRemoteKvFreesBlocks) {
  Pair p = MakePair(0);
  ASSERT_TRUE(p.decode->AddRequest("a", Prompt(30, 1), Greedy(8), Remote()).ok());
  p.decode->Step();
  auto tasks = p.decode->TakeRemotePrefillTasks();
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].block_ids.size(), 8u);
  EXPECT_GT(p.decode->Stats().num_kv_blocks_used, 0);
  EXPECT_FALSE(p.decode->HasUnfinishedRequests());  // nothing to step while awaiting KV
  p.decode->AbortRequest("a");
  auto outs = p.decode->Step();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].finish_reason, FinishReason::kAbort);
  EXPECT_EQ(p.decode->Stats().num_kv_blocks_used, 0);
  EXPECT_EQ(p.decode->CompleteRemotePrefill("a", 5, {}).code(), StatusCode::kNotFound);
  EXPECT_EQ(p.decode->FailRemotePrefill("a").code(), StatusCode::kNotFound);
}

TEST(DisaggEngine, HeldBlocksStayUntilReleased) {
  FakeModelRunner* runner;
  auto e = Make(&runner, 0);
  RequestOptions hold;
  hold.hold_blocks = true;
  ASSERT_TRUE(e->AddRequest("h", Prompt(10, 2), Greedy(1), hold).ok());
  auto got = RunToCompletion(*e);
  EXPECT_EQ(got["h"].token_ids.size(), 1u);
  EXPECT_EQ(e->Stats().num_kv_blocks_used, 3);
  EXPECT_FALSE(e->AddRequest("h", Prompt(4, 1), Greedy(1)).ok());  // id still holds blocks
  e->ReleaseHeldBlocks("h");
  EXPECT_EQ(e->Stats().num_kv_blocks_used, 0);
  e->ReleaseHeldBlocks("h");  // idempotent
}

}  // namespace
}  // namespace tandem
