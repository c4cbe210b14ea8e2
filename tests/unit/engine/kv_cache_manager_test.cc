#include "engine/kv_cache_manager.h"

#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "engine/block_hash.h"

namespace tandem {
namespace {

constexpr int kB = 4;  // block size

std::vector<int32_t> Tokens(int n, int salt = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 10 + salt * 1000 + i;
  return t;
}

// Prefills a request completely and caches its full blocks.
void Prefill(KVCacheManager& kv, const std::string& id, const std::vector<int32_t>& tokens) {
  const auto hashes = ComputeBlockHashes(tokens, kB);
  const CachedPrefix prefix = kv.FindCachedPrefix(hashes, static_cast<int>(tokens.size()));
  ASSERT_TRUE(kv.AllocateSlots(id, static_cast<int>(tokens.size()), &prefix));
  kv.CacheComputedBlocks(id, hashes, static_cast<int>(tokens.size()));
}

TEST(KVCacheManager, PrefixHitsAtBlockBoundariesNeverWholePrompt) {
  KVCacheManager kv(32, kB, true);
  const auto base = Tokens(12);  // 3 full blocks
  Prefill(kv, "a", base);
  // Same 12 tokens: at most 11 may be cached -> 2 blocks (8 tokens).
  EXPECT_EQ(kv.FindCachedPrefix(ComputeBlockHashes(base, kB), 12).num_tokens, 8);
  // 13 tokens sharing 12: all 3 blocks.
  auto longer = base;
  longer.push_back(99);
  auto p13 = kv.FindCachedPrefix(ComputeBlockHashes(longer, kB), 13);
  EXPECT_EQ(p13.num_tokens, 12);
  EXPECT_EQ(p13.block_ids, std::vector<int>(kv.GetBlockIds("a").begin(), kv.GetBlockIds("a").end()));
  // 11 tokens: 2 blocks.
  std::vector<int32_t> shorter(base.begin(), base.begin() + 11);
  EXPECT_EQ(kv.FindCachedPrefix(ComputeBlockHashes(shorter, kB), 11).num_tokens, 8);
  // A prompt diverging inside block 1: only block 0.
  auto diverge = base;
  diverge[6] = 7;
  EXPECT_EQ(kv.FindCachedPrefix(ComputeBlockHashes(diverge, kB), 12).num_tokens, 4);
  // Same block 1 content after a different block 0: no hit (chained hashes).
  auto other_head = base;
  other_head[0] = 5;
  EXPECT_EQ(kv.FindCachedPrefix(ComputeBlockHashes(other_head, kB), 12).num_tokens, 0);
  // Tiny prompts never hit.
  EXPECT_EQ(kv.FindCachedPrefix(ComputeBlockHashes(Tokens(4), kB), 4).num_tokens, 0);
  EXPECT_EQ(kv.FindCachedPrefix(ComputeBlockHashes(Tokens(5), kB), 5).num_tokens, 4);
}

TEST(KVCacheManager, SharedBlocksAndFreeReturnToBaseline) {
  KVCacheManager kv(8, kB, true);
  const auto t = Tokens(10);  // 3 blocks, 2 full
  Prefill(kv, "a", t);
  EXPECT_EQ(kv.num_used_blocks(), 3);
  // b shares a's two full blocks.
  auto t2 = t;
  t2.push_back(1);
  const auto h2 = ComputeBlockHashes(t2, kB);
  const CachedPrefix p = kv.FindCachedPrefix(h2, 11);
  EXPECT_EQ(p.num_tokens, 8);
  ASSERT_TRUE(kv.AllocateSlots("b", 11, &p));
  EXPECT_EQ(kv.num_used_blocks(), 4);  // 2 shared + a's tail + b's tail
  EXPECT_EQ(kv.pool().ref_count(kv.GetBlockIds("a")[0]), 2);
  kv.Free("a");
  EXPECT_EQ(kv.num_used_blocks(), 3);
  kv.Free("b");
  EXPECT_EQ(kv.num_used_blocks(), 0);
  EXPECT_EQ(kv.num_free_blocks(), 8);
  kv.Free("unknown");  // ignored
  // Freed cached blocks are still found.
  EXPECT_EQ(kv.FindCachedPrefix(h2, 11).num_tokens, 8);
}

TEST(KVCacheManager, HitOnFreeCachedBlocksCountsAgainstRoom) {
  KVCacheManager kv(4, kB, true);
  const auto t = Tokens(9);  // 3 blocks, 2 full
  Prefill(kv, "a", t);
  kv.Free("a");  // all 4 free; 2 cached
  const auto h = ComputeBlockHashes(t, kB);
  const CachedPrefix p = kv.FindCachedPrefix(h, 9);
  EXPECT_EQ(p.num_tokens, 8);
  // 8 cached + 12 new = 20 tokens = 5 blocks > 4: no room, nothing changes.
  EXPECT_FALSE(kv.AllocateSlots("b", 20, &p));
  EXPECT_EQ(kv.num_used_blocks(), 0);
  EXPECT_EQ(kv.FindCachedPrefix(h, 9).num_tokens, 8);
  // 16 tokens = 4 blocks: the two cached plus two fresh (evicting nothing cached).
  EXPECT_TRUE(kv.AllocateSlots("b", 16, &p));
  EXPECT_EQ(kv.num_used_blocks(), 4);
  EXPECT_EQ(kv.GetBlockIds("b")[0], p.block_ids[0]);
  EXPECT_EQ(kv.GetBlockIds("b")[1], p.block_ids[1]);
  kv.Free("b");
  EXPECT_EQ(kv.num_used_blocks(), 0);
}

TEST(KVCacheManager, GrowsOneBlockAtATimeAndConsecutively) {
  KVCacheManager kv(8, kB, false);
  EXPECT_TRUE(kv.AllocateSlots("a", 3));
  EXPECT_EQ(kv.GetBlockIds("a").size(), 1u);
  EXPECT_TRUE(kv.AllocateSlots("a", 4));
  EXPECT_EQ(kv.GetBlockIds("a").size(), 1u);
  EXPECT_TRUE(kv.AllocateSlots("a", 5));
  EXPECT_EQ(kv.GetBlockIds("a"), (std::vector<int>{0, 1}));
  EXPECT_TRUE(kv.AllocateSlots("a", 12));
  EXPECT_EQ(kv.GetBlockIds("a"), (std::vector<int>{0, 1, 2}));
  EXPECT_FALSE(kv.AllocateSlots("a", 40));
  EXPECT_EQ(kv.GetBlockIds("a").size(), 3u);
  // Without prefix caching nothing is found.
  const auto t = Tokens(12);
  kv.CacheComputedBlocks("a", ComputeBlockHashes(t, kB), 12);
  EXPECT_EQ(kv.FindCachedPrefix(ComputeBlockHashes(t, kB), 12).num_tokens, 0);
  kv.Free("a");
  EXPECT_EQ(kv.num_used_blocks(), 0);
}

}  // namespace
}  // namespace tandem
