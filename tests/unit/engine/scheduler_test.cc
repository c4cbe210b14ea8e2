#include "engine/scheduler.h"

#include <map>
#include <memory>
#include <set>
#include <vector>

#include <gtest/gtest.h>

namespace tandem {
namespace {

// Scheduler + KV cache manager driven by hand: sampled slices get token 7 appended.
struct Harness {
  Harness(int num_blocks, int block_size, int max_num_seqs, int budget, bool caching = true)
      : kv(num_blocks, block_size, caching), sched({max_num_seqs, budget}, &kv) {}

  Request* Add(const std::string& id, int prompt_len, int salt = 0) {
    auto r = std::make_unique<Request>();
    r->request_id = id;
    for (int i = 0; i < prompt_len; ++i) r->token_ids.push_back(100 + salt * 1000 + i);
    r->num_prompt_tokens = prompt_len;
    sched.AddRequest(r.get());
    reqs.push_back(std::move(r));
    return reqs.back().get();
  }
  SchedulerOutput Step() {
    SchedulerOutput out = sched.Schedule();
    sched.OnStepComputed(out);
    for (const ScheduledRequest& s : out.scheduled) {
      EXPECT_GE(static_cast<int>(kv.GetBlockIds(s.request->request_id).size()) * kv.block_size(),
                s.start_pos + s.num_new_tokens);
      if (s.samples) s.request->token_ids.push_back(7);
    }
    return out;
  }

  KVCacheManager kv;
  Scheduler sched;
  std::vector<std::unique_ptr<Request>> reqs;
};

TEST(Scheduler, TokenBudgetAndChunkedPrefill) {
  Harness h(64, 4, 8, 16);
  Request* a = h.Add("a", 10);
  Request* b = h.Add("b", 20, 1);
  auto s1 = h.Step();
  ASSERT_EQ(s1.scheduled.size(), 2u);
  EXPECT_EQ(s1.scheduled[0].num_new_tokens, 10);  // a: whole prompt, samples
  EXPECT_TRUE(s1.scheduled[0].samples);
  EXPECT_EQ(s1.scheduled[1].num_new_tokens, 6);   // b: a chunk, no sample
  EXPECT_FALSE(s1.scheduled[1].samples);
  EXPECT_EQ(s1.num_batched_tokens, 16);
  auto s2 = h.Step();  // a decodes 1, b continues with 14 (of its remaining 14)
  ASSERT_EQ(s2.scheduled.size(), 2u);
  EXPECT_EQ(s2.scheduled[0].num_new_tokens, 1);
  EXPECT_EQ(s2.scheduled[1].start_pos, 6);
  EXPECT_EQ(s2.scheduled[1].num_new_tokens, 14);
  EXPECT_TRUE(s2.scheduled[1].samples);
  EXPECT_EQ(a->num_output_tokens(), 2);
  EXPECT_EQ(b->num_output_tokens(), 1);
  for (int i = 0; i < 5; ++i) EXPECT_LE(h.Step().num_batched_tokens, 16);
  h.sched.FinishRequest(a);
  h.sched.FinishRequest(b);
  EXPECT_EQ(h.kv.num_used_blocks(), 0);
  EXPECT_TRUE(h.sched.empty());
}

TEST(Scheduler, MaxNumSeqs) {
  Harness h(64, 4, 2, 100);
  h.Add("a", 3);
  h.Add("b", 3, 1);
  Request* c = h.Add("c", 3, 2);
  auto s = h.Step();
  EXPECT_EQ(s.scheduled.size(), 2u);
  EXPECT_EQ(h.sched.num_running(), 2);
  EXPECT_EQ(h.sched.num_waiting(), 1);
  h.sched.FinishRequest(h.reqs[0].get());
  s = h.Step();
  ASSERT_EQ(s.scheduled.size(), 2u);
  EXPECT_EQ(s.scheduled[1].request, c);
}

TEST(Scheduler, PreemptsMostRecentAndRecomputesWithOutputs) {
  // 4 blocks of 4 tokens. a and b each take 2 blocks for their 5-token prompts; computing a 9th
  // token needs a third block, so the later one (b) is preempted.
  Harness h(4, 4, 8, 64, /*caching=*/false);
  Request* a = h.Add("a", 5);
  Request* b = h.Add("b", 5, 1);
  h.Step();  // both prefill; 6 tokens each
  h.Step();  // 7
  h.Step();  // 8
  h.Step();  // 9 (8 computed: still 2 blocks each)
  EXPECT_EQ(b->num_tokens(), 9);
  EXPECT_EQ(h.kv.num_used_blocks(), 4);
  const int b_outputs = b->num_output_tokens();
  auto s = h.Step();  // a needs a third block -> b preempted
  ASSERT_EQ(s.preempted.size(), 1u);
  EXPECT_EQ(s.preempted[0], b);
  EXPECT_EQ(b->status, RequestStatus::kPreempted);
  EXPECT_EQ(b->num_computed_tokens, 0);
  EXPECT_EQ(b->num_output_tokens(), b_outputs);  // kept for the recompute
  EXPECT_EQ(h.sched.num_waiting(), 1);
  EXPECT_EQ(h.kv.num_used_blocks(), 3);
  // Preempting step admits nobody; b waits until a is done.
  ASSERT_EQ(s.scheduled.size(), 1u);
  EXPECT_EQ(s.scheduled[0].request, a);
  h.sched.FinishRequest(a);
  s = h.Step();
  ASSERT_EQ(s.scheduled.size(), 1u);
  EXPECT_EQ(s.scheduled[0].request, b);
  EXPECT_EQ(s.scheduled[0].start_pos, 0);
  EXPECT_EQ(s.scheduled[0].num_new_tokens, 9);  // prompt + 4 outputs recomputed
  EXPECT_TRUE(s.scheduled[0].samples);
  EXPECT_EQ(b->num_output_tokens(), b_outputs + 1);
  h.sched.FinishRequest(b);
  EXPECT_EQ(h.kv.num_used_blocks(), 0);
}

TEST(Scheduler, RequestLargerThanPoolIsUnfittable) {
  Harness h(2, 4, 8, 64);
  Request* a = h.Add("a", 7);
  h.Step();  // 7 computed, 8 tokens
  h.Step();  // 8 computed (2 full blocks), 9 tokens
  auto s = h.Step();  // the 9th token would need a third block that does not exist
  ASSERT_EQ(s.unfittable.size(), 1u);
  EXPECT_EQ(s.unfittable[0], a);
  EXPECT_TRUE(h.sched.empty());
  EXPECT_EQ(h.kv.num_used_blocks(), 0);
}

TEST(Scheduler, PrefixCacheHitSkipsComputedBlocks) {
  Harness h(16, 4, 8, 64);
  Request* a = h.Add("a", 9);
  h.Step();
  h.sched.FinishRequest(a);
  Request* b = h.Add("b", 9);  // the same prompt
  auto s = h.Step();
  ASSERT_EQ(s.scheduled.size(), 1u);
  EXPECT_EQ(s.scheduled[0].start_pos, 8);
  EXPECT_EQ(s.scheduled[0].num_new_tokens, 1);
  EXPECT_EQ(b->num_cached_tokens, 8);
  EXPECT_EQ(h.sched.prefix_cache_queries(), 18u);
  EXPECT_EQ(h.sched.prefix_cache_hits(), 8u);
}

// A tier below the pool that holds whatever hashes the test puts in it.
struct FakeTier : kvtier::KvTierIndex {
  bool Contains(uint64_t h) const override { return hashes.count(h) > 0; }
  bool Pin(uint64_t h) override {
    if (hashes.count(h) == 0) return false;
    ++pins[h];
    return true;
  }
  void Unpin(uint64_t h) override { --pins[h]; }
  std::set<uint64_t> hashes;
  std::map<uint64_t, int> pins;
};

TEST(Scheduler, RequestsOnLandingBlocksWaitForThemWithoutHoldingUpOthers) {
  Harness h(16, 4, 8, 64);
  FakeTier tier;
  h.kv.SetTier(&tier);
  h.kv.set_async_onboard(true);
  // Prompt "a" (10 tokens: 2 full blocks) once, to learn its block hashes; then it leaves the pool
  // and its two full blocks are in the tier only.
  Request* a1 = h.Add("a1", 10);
  h.Step();
  ASSERT_GE(a1->block_hashes.size(), 2u);
  tier.hashes.insert(a1->block_hashes.begin(), a1->block_hashes.begin() + 2);
  h.sched.FinishRequest(a1);
  h.kv.ResetPrefixCache();
  (void)h.kv.TakeEvicted();

  Request* a2 = h.Add("a2", 10);
  Request* b = h.Add("b", 6, 1);
  const SchedulerOutput s1 = h.Step();
  // a2's prefix comes from the tier: admitted, holding its blocks, not computed; b behind it runs.
  EXPECT_EQ(s1.onboarding, std::vector<Request*>{a2});
  ASSERT_EQ(s1.scheduled.size(), 1u);
  EXPECT_EQ(s1.scheduled[0].request, b);
  EXPECT_EQ(a2->num_computed_tokens, 8);
  EXPECT_TRUE(h.kv.Landing("a2"));
  EXPECT_EQ(h.sched.num_onboarding(), 1);
  EXPECT_TRUE(h.sched.has_schedulable());
  const std::vector<kvtier::OnboardBlock> onboard = h.kv.TakeOnboard();
  ASSERT_EQ(onboard.size(), 2u);
  std::vector<int> ids;
  for (const kvtier::OnboardBlock& o : onboard) ids.push_back(o.block_id);
  EXPECT_EQ(tier.pins[onboard[0].hash], 1);

  // a3, the same prompt, finds the landing blocks in the pool and waits for them too.
  Request* a3 = h.Add("a3", 10);
  const SchedulerOutput s2 = h.Step();
  EXPECT_EQ(s2.onboarding, std::vector<Request*>{a3});
  ASSERT_EQ(s2.scheduled.size(), 1u);
  EXPECT_EQ(s2.scheduled[0].request, b);  // b decodes
  EXPECT_EQ(a3->num_computed_tokens, 8);
  EXPECT_TRUE(h.kv.TakeOnboard().empty());

  // a2 is aborted while the copies are in flight: the landing blocks keep a reference of their own
  // (a3's and the landing one), so nothing reuses them before they land.
  h.sched.FinishRequest(a2);
  for (int id : ids) EXPECT_EQ(h.kv.pool().ref_count(id), 2) << id;
  EXPECT_TRUE(h.Step().onboarding.empty());
  EXPECT_EQ(h.sched.num_onboarding(), 1);  // a3 still waits

  h.kv.MarkLanded(ids);
  for (int id : ids) EXPECT_EQ(h.kv.pool().ref_count(id), 1) << id;
  EXPECT_FALSE(h.kv.Landing("a3"));
  const SchedulerOutput s4 = h.Step();
  bool a3_ran = false;
  for (const ScheduledRequest& s : s4.scheduled) {
    if (s.request != a3) continue;
    a3_ran = true;
    EXPECT_EQ(s.start_pos, 8);
    EXPECT_EQ(s.num_new_tokens, 2);
    EXPECT_TRUE(s.samples);
  }
  EXPECT_TRUE(a3_ran);
  EXPECT_EQ(h.sched.num_onboarding(), 0);
}

TEST(Scheduler, WithoutAsynchronousOnboardingTierHitsRunAtOnce) {
  Harness h(16, 4, 8, 64);
  FakeTier tier;
  h.kv.SetTier(&tier);
  Request* a1 = h.Add("a1", 10);
  h.Step();
  tier.hashes.insert(a1->block_hashes.begin(), a1->block_hashes.begin() + 2);
  h.sched.FinishRequest(a1);
  h.kv.ResetPrefixCache();
  Request* a2 = h.Add("a2", 10);
  const SchedulerOutput s1 = h.Step();
  EXPECT_TRUE(s1.onboarding.empty());
  ASSERT_EQ(s1.scheduled.size(), 1u);
  EXPECT_EQ(s1.scheduled[0].request, a2);
  EXPECT_EQ(s1.scheduled[0].start_pos, 8);
  EXPECT_EQ(h.kv.TakeOnboard().size(), 2u);
  EXPECT_EQ(h.kv.num_landing(), 0);
}

}  // namespace
}  // namespace tandem
