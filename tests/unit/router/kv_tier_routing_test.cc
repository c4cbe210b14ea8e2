// KV tiers below the pool in routing (issue 26): KV events and snapshots that name the host or disk
// tier (JSON round trip, an old payload without a tier, a bad tier), and KvRouter's cost, where a
// prompt's next blocks in a worker's host tier, then in its disk tier, count their weights.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/kv_events.h"
#include "router/kv_router.h"

namespace tandem::router {
namespace {

std::vector<uint64_t> Chain(int from, int to) {  // hashes from+1 .. to
  std::vector<uint64_t> c;
  for (int i = from; i < to; ++i) c.push_back(static_cast<uint64_t>(i) + 1);
  return c;
}

void Apply(KvRouter& r, const std::string& w, std::vector<KvEvent> events) {
  auto res = r.ApplyEvents(w, events);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  ASSERT_EQ(res->num_applied, static_cast<int>(events.size()));
}

std::unique_ptr<KvRouter> Make(double host_weight = 0.8, double disk_weight = 0.5) {
  KvRouterConfig c;
  c.seed = 7;
  c.host_hit_weight = host_weight;
  c.disk_hit_weight = disk_weight;
  auto r = KvRouter::Create(c);
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE((*r)->AddWorker("a").ok());
  EXPECT_TRUE((*r)->AddWorker("b").ok());
  return std::move(r).value();
}

TEST(KvTierEvents, StoredAndRemovedNameTheirTierInJson) {
  const KvEvent host{3, KvStoredEvent{9, {10, 11}, KvTier::kHost}};
  const KvEvent disk{4, KvRemovedEvent{{12}, KvTier::kDisk}};
  const KvEvent device{5, KvStoredEvent{0, {1}}};
  for (const KvEvent& e : {host, disk, device}) {
    auto back = KvEventFromJson(ToJson(e));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, e);
  }
  EXPECT_EQ(ToJson(host)["data"]["stored"]["tier"], "host");
  EXPECT_FALSE(ToJson(device)["data"]["stored"].contains("tier"));  // as before tiers existed
  auto bad = nlohmann::json::parse(R"({"event_id":1,"data":{"removed":{"block_hashes":[1],"tier":"tape"}}})");
  EXPECT_FALSE(KvEventFromJson(bad).ok());
  KvCacheSnapshot snap;
  snap.last_event_id = 7;
  snap.blocks = {{1, 0, KvTier::kDevice}, {2, 1, KvTier::kHost}, {3, 2, KvTier::kDisk}};
  auto back = KvCacheSnapshotFromJson(ToJson(snap));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->blocks, snap.blocks);
  auto old = nlohmann::json::parse(R"({"last_event_id":1,"blocks":[[5,0]],"load":{"num_active_blocks":0,
      "num_total_blocks":1,"num_waiting":0,"num_running":0}})");
  auto old_snap = KvCacheSnapshotFromJson(old);
  ASSERT_TRUE(old_snap.ok());
  EXPECT_EQ(old_snap->blocks[0].tier, KvTier::kDevice);
  auto bad_tier = nlohmann::json::parse(R"({"last_event_id":1,"blocks":[[5,0,7]],"load":{"num_active_blocks":0,
      "num_total_blocks":1,"num_waiting":0,"num_running":0}})");
  EXPECT_FALSE(KvCacheSnapshotFromJson(bad_tier).ok());
}

TEST(KvTierRouting, HostHitsCountBelowPoolHitsAndAboveMisses) {
  // a: blocks 1-3 in its pool. b: blocks 1-2 in its pool, 3-6 in its host tier. Prompt: 1-6.
  auto r = Make();
  Apply(*r, "a", {{1, KvStoredEvent{0, Chain(0, 3)}}});
  Apply(*r, "b", {{1, KvStoredEvent{0, Chain(0, 2)}}, {2, KvStoredEvent{2, Chain(2, 6), KvTier::kHost}}});
  const std::vector<uint64_t> prompt = Chain(0, 6);
  auto d = r->Route(prompt);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->worker_id, "b");  // 6 - 2 - 0.8 * 4 = 0.8 blocks to prefill against a's 3
  EXPECT_EQ(d->overlap_blocks, 2);
  EXPECT_EQ(d->tier_blocks, 4);
  EXPECT_NEAR(d->tier_credit, 3.2, 1e-9);
  EXPECT_NEAR(d->cost, 0.8, 1e-9);
  // With host hits worth nothing, a's pool hits win.
  auto zero = Make(0.0, 0.0);
  Apply(*zero, "a", {{1, KvStoredEvent{0, Chain(0, 3)}}});
  Apply(*zero, "b", {{1, KvStoredEvent{0, Chain(0, 2)}}, {2, KvStoredEvent{2, Chain(2, 6), KvTier::kHost}}});
  EXPECT_EQ(zero->Route(prompt)->worker_id, "a");
}

TEST(KvTierRouting, TheChainGoesPoolThenHostThenDiskAndStopsAtAGap) {
  auto r = Make(0.8, 0.5);
  // b: 1 in the pool, 2-3 in host, 4-5 on disk, 7 on disk (after a gap at 6).
  Apply(*r, "b", {{1, KvStoredEvent{0, Chain(0, 1)}},
                  {2, KvStoredEvent{1, Chain(1, 3), KvTier::kHost}},
                  {3, KvStoredEvent{3, Chain(3, 5), KvTier::kDisk}},
                  {4, KvStoredEvent{6, Chain(6, 7), KvTier::kDisk}}});
  // A host block after a disk block does not count (the engine's lookup does not go back).
  Apply(*r, "a", {{1, KvStoredEvent{0, Chain(0, 1)}},
                  {2, KvStoredEvent{1, Chain(1, 2), KvTier::kDisk}},
                  {3, KvStoredEvent{2, Chain(2, 3), KvTier::kHost}}});
  const std::vector<uint64_t> prompt = Chain(0, 8);
  auto d = r->Route(prompt);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->worker_id, "b");
  EXPECT_EQ(d->tier_blocks, 4);
  EXPECT_NEAR(d->tier_credit, 0.8 * 2 + 0.5 * 2, 1e-9);
  // Removing b's disk blocks (a disk tier eviction) and its host blocks takes the credit away.
  Apply(*r, "b", {{5, KvRemovedEvent{Chain(3, 5), KvTier::kDisk}}, {6, KvRemovedEvent{Chain(1, 3), KvTier::kHost}}});
  Apply(*r, "a", {{4, KvRemovedEvent{Chain(1, 2), KvTier::kDisk}}});
  d = r->Route(prompt);
  EXPECT_EQ(d->tier_blocks, 0);
  EXPECT_EQ(d->tier_credit, 0.0);
  // A snapshot replaces every tier's blocks; cleared{} empties them all.
  KvCacheSnapshot snap;
  snap.last_event_id = 6;
  snap.blocks = {{1, 0, KvTier::kDevice}, {2, 1, KvTier::kHost}};
  ASSERT_TRUE(r->ApplySnapshot("b", snap).ok());
  d = r->Route(prompt);
  EXPECT_EQ(d->worker_id, "b");
  EXPECT_EQ(d->tier_blocks, 1);
  // cleared{} empties the pool only (the engine sends it when it drops its prefix cache; its
  // host and disk tiers keep their blocks): block 1 of b is no pool hit, block 2 no longer
  // follows a pool hit, and a's pool block 1 wins.
  Apply(*r, "b", {{7, KvClearedEvent{}}});
  d = r->Route(prompt);
  EXPECT_EQ(d->worker_id, "a");
  EXPECT_EQ(d->overlap_blocks, 1);
  Apply(*r, "b", {{8, KvStoredEvent{0, Chain(0, 1)}}});  // the pool's block 1 again: the chain resumes
  d = r->Route(prompt);
  EXPECT_EQ(d->worker_id, "b");
  EXPECT_EQ(d->tier_blocks, 1);
}

TEST(KvTierRouting, WeightsOutsideZeroToOneAreRefused) {
  KvRouterConfig c;
  c.host_hit_weight = 1.5;
  EXPECT_FALSE(KvRouter::Create(c).ok());
  c.host_hit_weight = 0.5;
  c.disk_hit_weight = -0.1;
  EXPECT_FALSE(KvRouter::Create(c).ok());
}

}  // namespace
}  // namespace tandem::router
