#include "engine/block_pool.h"

#include <vector>

#include <gtest/gtest.h>

namespace tandem {
namespace {

TEST(BlockPool, AllocateAndFreeCountRefs) {
  BlockPool pool(8);
  EXPECT_EQ(pool.num_free_blocks(), 8);
  auto a = pool.Allocate(3);
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(pool.num_used_blocks(), 3);
  pool.Touch(std::vector<int>{1});
  EXPECT_EQ(pool.ref_count(1), 2);
  pool.Free(*a);
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_EQ(pool.num_used_blocks(), 1);
  pool.Free(std::vector<int>{1});
  EXPECT_EQ(pool.num_used_blocks(), 0);
  EXPECT_FALSE(pool.Allocate(9));  // no room is a value, not an error
  EXPECT_EQ(pool.num_free_blocks(), 8);
}

TEST(BlockPool, PrefersConsecutiveIds) {
  BlockPool pool(16);
  auto a = pool.Allocate(2);  // 0 1
  auto b = pool.Allocate(2);  // 2 3
  auto c = pool.Allocate(4);  // 4..7
  pool.Free(*b);              // hole of 2 at 2..3
  // A request of 3 skips the hole of 2 and takes the first run long enough.
  auto d = pool.Allocate(3);
  EXPECT_EQ(*d, (std::vector<int>{8, 9, 10}));
  // Growing d continues its run.
  auto e = pool.Allocate(2, d->back());
  EXPECT_EQ(*e, (std::vector<int>{11, 12}));
  // A run that cannot continue takes the first free run.
  auto f = pool.Allocate(1, c->back());
  EXPECT_EQ(*f, (std::vector<int>{2}));
  // When no run is long enough, the longest runs are used first.
  auto g = pool.Allocate(4);  // free: 3, 13, 14, 15
  EXPECT_EQ(*g, (std::vector<int>{13, 14, 15, 3}));
  (void)a;
}

TEST(BlockPool, CachedBlocksStayFindableAndEvictLeastRecentlyFreedFirst) {
  BlockPool pool(4);
  auto a = pool.Allocate(4);
  ASSERT_TRUE(a);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(pool.CacheBlock(i, 100 + i));
  EXPECT_FALSE(pool.CacheBlock(0, 999));  // already has a hash
  // Free in the order 2, 0, 3, 1: the LRU order.
  for (int id : {2, 0, 3, 1}) pool.Free(std::vector<int>{id});
  EXPECT_EQ(pool.LruOrder(), (std::vector<int>{2, 0, 3, 1}));
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_EQ(pool.Lookup(100), 0);  // free but still cached
  // A cache hit takes block 0 out of the queue.
  pool.Touch(std::vector<int>{0});
  EXPECT_EQ(pool.LruOrder(), (std::vector<int>{2, 3, 1}));
  EXPECT_EQ(pool.num_free_blocks(), 3);
  // Allocation evicts 2 then 3.
  auto b = pool.Allocate(2);
  EXPECT_EQ(*b, (std::vector<int>{2, 3}));
  EXPECT_FALSE(pool.Lookup(102));
  EXPECT_FALSE(pool.Lookup(103));
  EXPECT_EQ(pool.Lookup(101), 1);
  EXPECT_FALSE(pool.block_hash(2));
  // Freed uncached blocks are reused before cached ones.
  pool.Free(*b);
  auto c = pool.Allocate(1);
  EXPECT_NE((*c)[0], 1);
  EXPECT_EQ(pool.Lookup(101), 1);
}

TEST(BlockPool, DuplicateHashKeepsFirstBlock) {
  BlockPool pool(4);
  auto a = pool.Allocate(2);
  EXPECT_TRUE(pool.CacheBlock(0, 7));
  EXPECT_FALSE(pool.CacheBlock(1, 7));
  EXPECT_EQ(pool.Lookup(7), 0);
  pool.Free(*a);
  EXPECT_EQ(pool.LruOrder(), (std::vector<int>{0}));
  EXPECT_EQ(pool.EvictAllCached(), 1);
  EXPECT_FALSE(pool.Lookup(7));
  EXPECT_EQ(pool.num_cached_blocks(), 0);
}

}  // namespace
}  // namespace tandem
