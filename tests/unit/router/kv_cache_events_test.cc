// KV events recorded by the KVCacheManager / BlockPool: stored chains with their parents, evictions
// as removed, a reset leaving nothing cached as cleared, duplicates not stored twice, snapshots.
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "engine/block_hash.h"
#include "engine/kv_cache_manager.h"
#include "engine/kv_events.h"

namespace tandem {
namespace {

TEST(KvCacheEventsTest, KvCacheManagerRecordsChainsEvictionsAndClear) {
  KVCacheManager kv(/*num_blocks=*/4, /*block_size=*/2, /*enable_prefix_caching=*/true);
  kv.EnableEvents();
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6};
  const std::vector<uint64_t> ha = ComputeBlockHashes(a, 2);
  ASSERT_TRUE(kv.AllocateSlots("a", 6));
  kv.CacheComputedBlocks("a", ha, 6);
  std::vector<KvEvent> events = kv.TakeEvents();
  ASSERT_EQ(events.size(), 1u);  // one chain
  EXPECT_EQ(events[0], (KvEvent{1, KvStoredEvent{0, ha}}));
  EXPECT_TRUE(kv.TakeEvents().empty());
  kv.Free("a");
  EXPECT_TRUE(kv.TakeEvents().empty());  // freed blocks stay cached
  ASSERT_TRUE(kv.AllocateSlots("b", 8));  // needs all 4 blocks: the 3 cached ones are evicted
  events = kv.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  const auto& removed = std::get<KvRemovedEvent>(events[0].data).block_hashes;
  EXPECT_EQ(events[0].event_id, 2u);
  EXPECT_EQ(std::set<uint64_t>(removed.begin(), removed.end()),
            std::set<uint64_t>(ha.begin(), ha.end()));
  const std::vector<int32_t> c = {7, 8, 9, 10};
  const std::vector<uint64_t> hc = ComputeBlockHashes(c, 2);
  kv.CacheComputedBlocks("b", hc, 4);
  kv.Free("b");
  events = kv.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], (KvEvent{3, KvStoredEvent{0, hc}}));
  KvCacheSnapshot snap = kv.Snapshot();
  EXPECT_EQ(snap.last_event_id, 3u);
  ASSERT_EQ(snap.blocks.size(), 2u);  // in block id order
  if (snap.blocks[0].block_hash != hc[0]) std::swap(snap.blocks[0], snap.blocks[1]);
  EXPECT_EQ(snap.blocks, (std::vector<KvCachedBlock>{{hc[0], 0}, {hc[1], hc[0]}}));
  kv.ResetPrefixCache();  // nothing cached is left: cleared{} instead of the removes
  events = kv.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], (KvEvent{4, KvClearedEvent{}}));
  EXPECT_TRUE(kv.Snapshot().blocks.empty());
}

TEST(KvCacheEventsTest, DuplicateBlocksAreNotStoredTwice) {
  KVCacheManager kv(/*num_blocks=*/8, /*block_size=*/2, /*enable_prefix_caching=*/true);
  kv.EnableEvents();
  const std::vector<uint64_t> hx = ComputeBlockHashes(std::vector<int32_t>{7, 8, 9, 10}, 2);
  const std::vector<uint64_t> hy = ComputeBlockHashes(std::vector<int32_t>{7, 8, 9, 10, 11, 12}, 2);
  const std::vector<uint64_t> hz = ComputeBlockHashes(std::vector<int32_t>{1, 2}, 2);
  ASSERT_TRUE(kv.AllocateSlots("x", 4));
  ASSERT_TRUE(kv.AllocateSlots("y", 6));  // computed concurrently: no prefix hit
  ASSERT_TRUE(kv.AllocateSlots("z", 2));
  kv.CacheComputedBlocks("x", hx, 4);
  kv.CacheComputedBlocks("z", hz, 2);
  kv.CacheComputedBlocks("y", hy, 6);  // its first two blocks duplicate x's: only the third is new
  const std::vector<KvEvent> events = kv.TakeEvents();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0], (KvEvent{1, KvStoredEvent{0, hx}}));
  EXPECT_EQ(events[1], (KvEvent{2, KvStoredEvent{0, hz}}));
  EXPECT_EQ(events[2], (KvEvent{3, KvStoredEvent{hy[1], {hy[2]}}}));
  // Recorded right after x's chain, y's block extends that stored event.
  KVCacheManager kv2(8, 2, true);
  kv2.EnableEvents();
  ASSERT_TRUE(kv2.AllocateSlots("x", 4));
  ASSERT_TRUE(kv2.AllocateSlots("y", 6));
  kv2.CacheComputedBlocks("x", hx, 4);
  kv2.CacheComputedBlocks("y", hy, 6);
  EXPECT_EQ(kv2.TakeEvents(), (std::vector<KvEvent>{{1, KvStoredEvent{0, hy}}}));
}

}  // namespace
}  // namespace tandem
