// The engine with a KV host tier whose onboarding is asynchronous (ModelRunner::StartKvOnboard, a
// GPU runner's side stream), on the real CPU runner and the bundled tiny Qwen3 behind a decorator
// that makes its onboard copies land late: StartKvOnboard first fills the target pool blocks with
// garbage (what a block holds before its copy arrived) and the real bytes arrive only at the
// third poll of the ticket, or when the engine waits for it. A step that read a landing block
// early would compute from garbage, so greedy tokens equal to the run without the tier show that
// the requests on landing blocks waited for them; the other requests ran meanwhile.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "disagg_test_util.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "kv_offload_test_util.h"
#include "model/forwarding_model_runner.h"

namespace tandem {
namespace {

using testing::Collected;
using testing::Greedy;
using testing::RunToCompletion;
using testing::RunWaves;
using Waves = testing::OffloadWaves;

constexpr int kBlock = testing::kOffloadBlock;
std::vector<int32_t> Prompt(int seed) { return testing::OffloadPrompt(seed); }

// What a block holds before its copy arrived: 0x7f bytes (bf16 ~3e38) in the pool blocks `copies`
// fill and in the host slots they write (a slot: every layer of a block). `garbage` keeps the
// source bytes of the pool's copies.
Status Poison(ModelRunner& runner, std::span<const KvBlockCopy> copies, std::vector<std::byte>* garbage) {
  const KVCacheLayout layout = runner.kv_cache_layout();
  garbage->assign(layout.block_bytes * layout.layer_base.size(), std::byte{0x7f});
  std::vector<KvBlockCopy> into_pool;
  for (const KvBlockCopy& k : copies) {
    if (k.to_host) std::fill(k.host, k.host + garbage->size(), std::byte{0x7f});
    else into_pool.push_back({k.block_id, garbage->data(), false});
  }
  return runner.CopyKvBlocks(into_pool);
}

class LateOnboardRunner final : public ForwardingModelRunner {
 public:
  struct Counters {
    int started = 0, polls = 0, waits = 0, landed = 0;
    bool fail_start = false;
  };
  LateOnboardRunner(std::unique_ptr<ModelRunner> inner, Counters* counters)
      : ForwardingModelRunner(std::move(inner)), c_(*counters) {}
  bool AsyncKvOnboard() const override { return true; }
  Status StartKvOnboard(std::span<const KvBlockCopy> copies, uint64_t* ticket) override {
    if (c_.fail_start) return Status(StatusCode::kInternal, "the side stream refused the copy");
    TANDEM_RETURN_IF_ERROR(Poison(inner(), copies, &garbage_));
    flights_.push_back({++next_, 0, {copies.begin(), copies.end()}});
    *ticket = next_;
    ++c_.started;
    return Status::Ok();
  }
  Status PollKvOnboard(uint64_t ticket, bool wait, bool* landed, double* seconds) override {
    ++c_.polls;
    c_.waits += wait ? 1 : 0;
    *landed = false;
    for (auto it = flights_.begin(); it != flights_.end(); ++it) {
      if (it->ticket != ticket) continue;
      if (!wait && ++it->polls < 3) return Status::Ok();
      TANDEM_RETURN_IF_ERROR(inner().CopyKvBlocks(it->copies));
      flights_.erase(it);
      *landed = true;
      *seconds = 0.001;
      ++c_.landed;
      return Status::Ok();
    }
    return Err(StatusCode::kInvalidArgument, "no onboarding {}", ticket);
  }

 private:
  struct Flight {
    uint64_t ticket;
    int polls;
    std::vector<KvBlockCopy> copies;
  };
  Counters& c_;
  std::vector<std::byte> garbage_;
  std::vector<Flight> flights_;
  uint64_t next_ = 0;
};

// Layer-wise copies (ModelRunner::StartKvCopiesByLayer) as a side stream that has not run yet:
// the call leaves garbage where its copies will write (the onboarded pool blocks, the evicted
// blocks' host slots) and the copies happen only when the next step starts (out of the pool
// first, then into it, as the CUDA runner does layer by layer), or at the next sync or copy.
class LayeredCopyRunner final : public ForwardingModelRunner {
 public:
  struct Counters {
    int calls = 0, out = 0, in = 0;
  };
  LayeredCopyRunner(std::unique_ptr<ModelRunner> inner, Counters* counters)
      : ForwardingModelRunner(std::move(inner)), c_(*counters) {}
  bool LayerwiseKvCopies() const override { return true; }
  // A device pool's layout (device 0), so that the tier treats the copies as a GPU's: landed only
  // at the next sync, the evicted blocks' slots held until then.
  KVCacheLayout kv_cache_layout() override {
    KVCacheLayout layout = inner().kv_cache_layout();
    layout.device_id = 0;
    return layout;
  }
  Status StartKvCopiesByLayer(std::span<const KvBlockCopy> copies) override {
    TANDEM_RETURN_IF_ERROR(Land());
    TANDEM_RETURN_IF_ERROR(Poison(inner(), copies, &garbage_));
    for (const KvBlockCopy& k : copies) ++(k.to_host ? c_.out : c_.in);
    pending_.assign(copies.begin(), copies.end());
    ++c_.calls;
    return Status::Ok();
  }
  KvCopySeconds TakeKvLayerCopySeconds() override { return {0.001, 0.002}; }
  Status Execute(const ForwardBatch& batch, ForwardOutput* out) override {
    TANDEM_RETURN_IF_ERROR(Land());
    return inner().Execute(batch, out);
  }
  Status CopyKvBlocks(std::span<const KvBlockCopy> copies) override {
    TANDEM_RETURN_IF_ERROR(Land());
    return inner().CopyKvBlocks(copies);
  }
  Status SyncKvCopies() override { return Land(); }

 private:
  Status Land() {
    std::vector<KvBlockCopy> ordered;
    for (bool out : {true, false}) {
      for (const KvBlockCopy& k : pending_) {
        if (k.to_host == out) ordered.push_back(k);
      }
    }
    pending_.clear();
    return inner().CopyKvBlocks(ordered);
  }
  Counters& c_;
  std::vector<std::byte> garbage_;
  std::vector<KvBlockCopy> pending_;
};

// runner_out: the runner the engine steps (the outermost decorator); max_local: prompts with more
// uncached tokens than this go to a remote prefill when the request allows it (-1: the default).
std::unique_ptr<Engine> MakeEngine(size_t offload_bytes, int num_blocks,
                                   LateOnboardRunner::Counters* late = nullptr,
                                   LayeredCopyRunner::Counters* layered = nullptr,
                                   ModelRunner** runner_out = nullptr, int max_local = -1) {
  auto runner = LoadCpuModelRunner(DefaultModelDir());
  EXPECT_TRUE(runner.ok()) << runner.status().ToString();
  if (!runner.ok()) return nullptr;
  std::unique_ptr<ModelRunner> r = std::move(runner).value();
  if (late != nullptr) r = std::make_unique<LateOnboardRunner>(std::move(r), late);
  if (layered != nullptr) r = std::make_unique<LayeredCopyRunner>(std::move(r), layered);
  if (runner_out != nullptr) *runner_out = r.get();
  EngineConfig c;
  c.block_size = kBlock;
  c.num_kv_blocks = num_blocks;
  c.kv_offload_host_bytes = offload_bytes;
  if (max_local >= 0) c.max_local_prefill_tokens = max_local;
  auto engine = Engine::Create(std::move(r), nullptr, c);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

// a1's blocks leave the pool while b..e run; then a2 and a3 (a1's prompt) come back together with
// f, a prompt of its own: f runs while a2's blocks land, a3 finds them in the pool and waits too.
const Waves kReturnBesideANewPrompt = {
    {{"a1", 1}}, {{"b", 2}}, {{"c", 3}}, {{"d", 4}}, {{"e", 5}}, {{"a2", 1}, {"a3", 1}, {"f", 6}}};

TEST(KvOffloadAsyncEngine, RequestsOnLandingBlocksWaitAndGiveTheSameTokens) {
  LateOnboardRunner::Counters late;
  auto off = MakeEngine(0, 24);
  auto on = MakeEngine(64u << 20, 24, &late);
  ASSERT_TRUE(off && on);
  const auto got_off = RunWaves(*off, kReturnBesideANewPrompt);
  const auto got_on = RunWaves(*on, kReturnBesideANewPrompt);
  for (const auto& [id, c] : got_off) {
    ASSERT_TRUE(got_on.count(id)) << id;
    EXPECT_EQ(got_on.at(id).token_ids, c.token_ids) << id;
    EXPECT_EQ(got_on.at(id).finish_reason, c.finish_reason) << id;
  }
  EXPECT_EQ(got_on.at("a2").token_ids, got_on.at("a1").token_ids);
  EXPECT_EQ(got_on.at("a2").num_cached_tokens, 5 * kBlock);
  EXPECT_EQ(got_on.at("a3").num_cached_tokens, 5 * kBlock);
  EXPECT_GT(late.started, 0);
  EXPECT_EQ(late.landed, late.started);
  EXPECT_GT(late.polls, late.started);  // polled before landing: the steps went on meanwhile
  const EngineStats s = on->Stats();
  EXPECT_GT(s.kv_onboarded_blocks, 0u);
  EXPECT_EQ(s.num_kv_blocks_used, 0);  // the landing references went back too
  EXPECT_EQ(s.num_running, 0);
}

TEST(KvOffloadAsyncEngine, AnAbortWhileTheBlocksLandLeavesThePoolWhole) {
  LateOnboardRunner::Counters late;
  auto on = MakeEngine(64u << 20, 24, &late);
  ASSERT_TRUE(on);
  auto got = RunWaves(*on, {{{"a1", 1}}, {{"b", 2}}, {{"c", 3}}, {{"d", 4}}, {{"e", 5}}});
  ASSERT_TRUE(on->AddRequest("a2", Prompt(1), Greedy(12)).ok());
  ASSERT_TRUE(on->AddRequest("f", Prompt(6), Greedy(12)).ok());
  testing::Absorb(got, on->Step());  // a2 admitted to wait for its blocks, f computed
  ASSERT_EQ(late.started, 1);
  ASSERT_EQ(late.landed, 0);
  // Both go: nothing is left to compute, and the copy still in flight is waited for all the same
  // (its blocks' landing references come back only then).
  on->AbortRequest("a2");
  on->AbortRequest("f");
  EXPECT_TRUE(on->HasUnfinishedRequests());
  got = RunToCompletion(*on, std::move(got));
  EXPECT_EQ(late.landed, 1);
  EXPECT_EQ(on->Stats().num_kv_blocks_used, 0);
  // The engine goes on serving, and a1's prompt comes back right.
  got = RunWaves(*on, {{{"a3", 1}}}, std::move(got));
  EXPECT_EQ(got.at("a3").token_ids, got.at("a1").token_ids);
  EXPECT_EQ(on->Stats().num_kv_blocks_used, 0);
}

TEST(KvOffloadAsyncEngine, AnOnboardingThatCannotStartFailsItsRequestsCleanly) {
  LateOnboardRunner::Counters late;
  auto on = MakeEngine(64u << 20, 24, &late);
  ASSERT_TRUE(on);
  auto got = RunWaves(*on, {{{"a1", 1}}, {{"b", 2}}, {{"c", 3}}, {{"d", 4}}, {{"e", 5}}});
  late.fail_start = true;
  got = RunWaves(*on, {{{"a2", 1}, {"a3", 1}, {"f", 6}}}, std::move(got));
  EXPECT_EQ(got.at("a2").finish_reason, FinishReason::kError);
  EXPECT_NE(got.at("a2").error.find("refused"), std::string::npos) << got.at("a2").error;
  EXPECT_EQ(got.at("a3").finish_reason, FinishReason::kError);
  EXPECT_EQ(on->Stats().num_kv_blocks_used, 0);
  // The next request with that prompt recomputes it (the prefix cache was dropped) or onboards it.
  late.fail_start = false;
  got = RunWaves(*on, {{{"a4", 1}}}, std::move(got));
  EXPECT_EQ(got.at("a4").token_ids, got.at("a1").token_ids);
  EXPECT_EQ(on->Stats().num_kv_blocks_used, 0);
}

// A remote prefill admitted in the step whose onboarding cannot start fails with that error too
// (its cached prefix may be among the stale blocks), instead of waiting for a task never handed
// out; the engine goes on serving remote prefills.
TEST(KvOffloadAsyncEngine, ARemotePrefillInAFailedOnboardingStepFails) {
  LateOnboardRunner::Counters late;
  ModelRunner* decode_runner = nullptr;
  auto decode = MakeEngine(64u << 20, 24, &late, nullptr, &decode_runner, /*max_local=*/32);
  ModelRunner* prefill_runner = nullptr;
  auto prefill = MakeEngine(0, 64, nullptr, nullptr, &prefill_runner);
  ASSERT_TRUE(decode && prefill);
  auto got = RunWaves(*decode, {{{"a1", 1}}, {{"b", 2}}, {{"c", 3}}, {{"d", 4}}, {{"e", 5}}});
  RequestOptions remote;
  remote.allow_remote_prefill = true;
  late.fail_start = true;
  ASSERT_TRUE(decode->AddRequest("a2", Prompt(1), Greedy(12)).ok());
  ASSERT_TRUE(decode->AddRequest("r", Prompt(6), Greedy(12), remote).ok());
  testing::DisaggCounters counters;
  for (auto& [id, c] : testing::RunDisaggregated(*decode, *decode_runner, *prefill, *prefill_runner, kBlock,
                                                 &counters)) {
    got[id] = std::move(c);
  }
  EXPECT_EQ(got.at("a2").finish_reason, FinishReason::kError);
  ASSERT_TRUE(got.count("r"));
  EXPECT_EQ(got.at("r").finish_reason, FinishReason::kError);
  EXPECT_NE(got.at("r").error.find("refused"), std::string::npos) << got.at("r").error;
  EXPECT_EQ(counters.num_transfers, 0);
  EXPECT_EQ(decode->Stats().num_kv_blocks_used, 0);
  late.fail_start = false;
  ASSERT_TRUE(decode->AddRequest("r2", Prompt(6), Greedy(12), remote).ok());
  for (auto& [id, c] : testing::RunDisaggregated(*decode, *decode_runner, *prefill, *prefill_runner, kBlock,
                                                 &counters)) {
    got[id] = std::move(c);
  }
  EXPECT_EQ(counters.num_transfers, 1);
  EXPECT_NE(got.at("r2").finish_reason, FinishReason::kError);
  EXPECT_EQ(decode->Stats().num_kv_blocks_used, 0);
}

// Layer-wise copies, both directions: the evicted blocks' bytes reach the tier only when the next
// step starts, and the onboarded ones the pool; greedy tokens equal the run without the tier's,
// with the evictions riding along with onboard copies (the default) and alone (a minimum of 1).
TEST(KvOffloadLayeredEngine, EvictedAndOnboardedBlocksGoLayerwiseAndGiveTheSameTokens) {
  auto off = MakeEngine(0, 24);
  ASSERT_TRUE(off);
  const auto got_off = RunWaves(*off, kReturnBesideANewPrompt);
  for (const char* min : {"", "1"}) {
    SCOPED_TRACE(std::string("TANDEM_KV_EVICT_LAYERED_MIN=") + min);
    if (*min != 0) ::setenv("TANDEM_KV_EVICT_LAYERED_MIN", min, 1);
    LayeredCopyRunner::Counters layered;
    auto on = MakeEngine(64u << 20, 24, nullptr, &layered);
    ::unsetenv("TANDEM_KV_EVICT_LAYERED_MIN");
    ASSERT_TRUE(on);
    const auto got_on = RunWaves(*on, kReturnBesideANewPrompt);
    for (const auto& [id, c] : got_off) {
      ASSERT_TRUE(got_on.count(id)) << id;
      EXPECT_EQ(got_on.at(id).token_ids, c.token_ids) << id;
    }
    EXPECT_EQ(got_on.at("a2").num_cached_tokens, 5 * kBlock);
    EXPECT_GT(layered.in, 0);
    const EngineStats s = on->Stats();
    EXPECT_EQ(s.kv_onboarded_blocks, static_cast<uint64_t>(layered.in));
    EXPECT_EQ(s.num_kv_blocks_used, 0);
    if (*min != 0) {
      EXPECT_EQ(static_cast<uint64_t>(layered.out), s.kv_offloaded_blocks);  // every eviction layer-wise
    } else {
      EXPECT_GT(layered.out, 0);  // some rode with onboard copies
      EXPECT_LT(static_cast<uint64_t>(layered.out), s.kv_offloaded_blocks);  // the small ones ahead
    }
  }
}

// A remote prefill admitted into blocks it evicted: their copies out of the pool are layer-wise
// and still in flight when the engine hands out the task, and the prefill worker's KV may arrive
// before the decode engine's next step (here it is written at once, as a fast transfer can). The
// engine waits for the copies out before it hands out the task, so the tier keeps a1's KV under
// a1's hashes: a2 (a1's prompt again, after the remote prefills of b..e evicted a1's blocks)
// onboards it and gives a1's tokens. Without the wait the tier stored e's KV there.
TEST(KvOffloadLayeredEngine, ARemotePrefillIntoEvictedBlocksWaitsForTheirCopiesOut) {
  ::setenv("TANDEM_KV_EVICT_LAYERED_MIN", "1", 1);  // every eviction layer-wise, in flight
  LayeredCopyRunner::Counters layered;
  ModelRunner* decode_runner = nullptr;
  auto decode = MakeEngine(64u << 20, 24, nullptr, &layered, &decode_runner, /*max_local=*/32);
  ::unsetenv("TANDEM_KV_EVICT_LAYERED_MIN");
  ModelRunner* prefill_runner = nullptr;
  auto prefill = MakeEngine(0, 64, nullptr, nullptr, &prefill_runner);
  ASSERT_TRUE(decode && prefill);
  auto got = RunWaves(*decode, {{{"a1", 1}}});
  RequestOptions remote;
  remote.allow_remote_prefill = true;
  testing::DisaggCounters counters;
  const char* ids[] = {"b", "c", "d", "e"};
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(decode->AddRequest(ids[i], Prompt(i + 2), Greedy(12), remote).ok());
    const int out_before = layered.out;
    for (auto& [id, c] : testing::RunDisaggregated(*decode, *decode_runner, *prefill, *prefill_runner,
                                                   kBlock, &counters)) {
      got[id] = std::move(c);
    }
    SCOPED_TRACE(ids[i]);
    EXPECT_NE(got.at(ids[i]).finish_reason, FinishReason::kError);
    EXPECT_FALSE(got.at(ids[i]).token_ids.empty());
    if (i == 3) EXPECT_GT(layered.out, out_before);  // e's admission evicted (a1's blocks)
  }
  EXPECT_EQ(counters.num_transfers, 4);
  got = RunWaves(*decode, {{{"a2", 1}}}, std::move(got));
  EXPECT_EQ(got.at("a2").num_cached_tokens, 5 * kBlock);  // a1's blocks, from the tier
  EXPECT_EQ(got.at("a2").token_ids, got.at("a1").token_ids);
  EXPECT_GT(decode->Stats().kv_onboarded_blocks, 0u);
  EXPECT_EQ(decode->Stats().num_kv_blocks_used, 0);
}

}  // namespace
}  // namespace tandem
