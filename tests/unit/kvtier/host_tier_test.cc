// HostKvTier (kvtier/host_tier.h): slots, LRU eviction, pins, drops.
#include "kvtier/host_tier.h"

#include <cstring>

#include <gtest/gtest.h>

namespace tandem::kvtier {
namespace {

constexpr size_t kSlot = 64;

// Stores `hash` with every byte set to `fill`.
void Put(HostKvTier& t, uint64_t hash, unsigned char fill, uint64_t parent = 0) {
  auto slot = t.Reserve(hash, parent);
  ASSERT_TRUE(slot.has_value()) << hash;
  std::memset(t.SlotData(*slot), fill, kSlot);
  t.Commit(*slot);
}

TEST(HostKvTier, StoresAndFindsBlocksWithTheirBytesAndParent) {
  HostKvTier t(kSlot, 3 * kSlot);
  EXPECT_EQ(t.capacity_blocks(), 3);
  Put(t, 11, 0xa1);
  Put(t, 22, 0xb2, 11);
  EXPECT_TRUE(t.Contains(11));
  EXPECT_FALSE(t.Contains(33));
  auto s = t.Find(22);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(static_cast<unsigned char>(t.SlotData(*s)[kSlot - 1]), 0xb2);
  EXPECT_EQ(t.parent_hash(*s), 11u);
  EXPECT_FALSE(t.Reserve(22, 11).has_value()) << "a hash is stored once";
  EXPECT_EQ(t.stats().blocks, 2);
}

TEST(HostKvTier, AFullTierEvictsTheLeastRecentlyUsedUnpinnedBlock) {
  HostKvTier t(kSlot, 3 * kSlot);
  Put(t, 1, 1);
  Put(t, 2, 2);
  Put(t, 3, 3);
  ASSERT_TRUE(t.Find(1).has_value());  // 1 is now the most recently used: 2 goes first
  Put(t, 4, 4);
  EXPECT_TRUE(t.Contains(1));
  EXPECT_FALSE(t.Contains(2));
  EXPECT_TRUE(t.Contains(3));
  ASSERT_TRUE(t.Pin(3));  // pinned: skipped; 1 is the oldest unpinned
  Put(t, 5, 5);
  EXPECT_TRUE(t.Contains(3));
  EXPECT_FALSE(t.Contains(1));
  EXPECT_EQ(t.stats().evicted, 2u);
}

TEST(HostKvTier, EveryBlockPinnedMeansNoRoom) {
  HostKvTier t(kSlot, 2 * kSlot);
  Put(t, 1, 1);
  Put(t, 2, 2);
  ASSERT_TRUE(t.Pin(1));
  ASSERT_TRUE(t.Pin(2));
  EXPECT_FALSE(t.Reserve(3, 0).has_value());
  t.Unpin(2);
  EXPECT_TRUE(t.Reserve(3, 0).has_value());
  EXPECT_FALSE(t.Contains(2));
  EXPECT_FALSE(t.Contains(3)) << "not findable before Commit";
}

TEST(HostKvTier, DropRemovesTheBlock) {
  HostKvTier t(kSlot, 2 * kSlot);
  Put(t, 7, 0x5c);
  ASSERT_TRUE(t.Find(7).has_value());
  t.Drop(7);
  EXPECT_FALSE(t.Contains(7));
  Put(t, 8, 1);  // the slot is reusable
  Put(t, 9, 2);
  EXPECT_EQ(t.stats().blocks, 2);
}

TEST(HostKvTier, AbandonedReservationsAndTiersOfNoSlots) {
  HostKvTier t(kSlot, kSlot);
  auto s = t.Reserve(1, 0);
  ASSERT_TRUE(s.has_value());
  EXPECT_FALSE(t.Reserve(1, 0).has_value()) << "reserved already";
  t.Abandon(*s);
  EXPECT_FALSE(t.Contains(1));
  Put(t, 1, 3);
  HostKvTier none(kSlot, kSlot - 1);
  EXPECT_EQ(none.capacity_blocks(), 0);
  EXPECT_FALSE(none.Reserve(1, 0).has_value());
}

}  // namespace
}  // namespace tandem::kvtier
