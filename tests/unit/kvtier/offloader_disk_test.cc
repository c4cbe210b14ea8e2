// KvOffloader with a disk tier and an asynchronous pool copier (what a GPU pool has: the copies
// land only at the next sync), on a fake pool in host memory: a slot whose bytes are still on
// their way from the pool is not handed to a disk fetch, and what reaches the disk is the block's
// own bytes under its own hash.
#include "kvtier/offloader.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tandem::kvtier {
namespace {

constexpr size_t kSlot = 8192;

// A pool of `n` blocks of kSlot bytes; copies queue until sync (asynchronous, like a device pool).
struct FakePool {
  explicit FakePool(int n) : blocks(n, std::vector<std::byte>(kSlot)) {
    for (int b = 0; b < n; ++b) {
      for (size_t i = 0; i < kSlot; ++i) blocks[b][i] = std::byte(static_cast<unsigned char>(b * 37 + i));
    }
  }
  PoolCopier Copier() {
    PoolCopier c;
    c.async = true;
    c.copy = [this](std::span<const KvBlockCopy> copies) {
      pending.insert(pending.end(), copies.begin(), copies.end());
      return Status::Ok();
    };
    c.sync = [this] {
      if (fail_sync) {
        pending.clear();
        return Status(StatusCode::kInternal, "the device copy failed");
      }
      for (const KvBlockCopy& k : pending) {
        if (k.to_host) std::memcpy(k.host, blocks[k.block_id].data(), kSlot);
        else std::memcpy(blocks[k.block_id].data(), k.host, kSlot);
      }
      pending.clear();
      return Status::Ok();
    };
    return c;
  }
  std::vector<std::vector<std::byte>> blocks;
  std::vector<KvBlockCopy> pending;
  bool fail_sync = false;
};

class OffloaderDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tandem-offloader-disk-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_;
};

// Polls until the disk holds `hash` (bounded).
bool AwaitOnDisk(KvOffloader& o, uint64_t hash) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < end) {
    o.Poll();
    if (o.disk()->Contains(hash)) return true;
    o.disk()->WaitForCompletion(20);
  }
  return false;
}

TEST_F(OffloaderDiskTest, ASlotStillFillingFromThePoolIsNotTakenByADiskFetch) {
  FakePool pool(4);
  DiskTierConfig disk;
  disk.dir = dir_;
  disk.capacity_bytes = 16 * (kSlot + 4096);
  KvOffloader o(pool.Copier(), kSlot, kSlot /* one host slot */, &disk);
  ASSERT_NE(o.disk(), nullptr);
  const uint64_t kB = 0xb0b, kA = 0xa0a;
  // Block B (pool block 0) goes to the host tier, then (at the next step) to disk.
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{0, kB, 0}}, {}).ok());
  ASSERT_TRUE(o.BeforeForward({}, {}).ok());
  ASSERT_TRUE(AwaitOnDisk(o, kB));
  // Block A (pool block 1) takes the only host slot; its bytes are still on their way.
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{1, kA, 0}}, {}).ok());
  EXPECT_TRUE(o.Contains(kA));
  EXPECT_TRUE(o.InLowerTier(kB));
  // A lookup in the next scheduling wants B back: there is no slot to read it into.
  const std::vector<uint64_t> chain = {kB};
  EXPECT_EQ(o.FetchFromLowerTier(chain, 0), 0);
  EXPECT_TRUE(o.Contains(kA));
  // The step's sync lands A; it is released and written through with pool block 1's bytes.
  ASSERT_TRUE(o.BeforeForward({}, {}).ok());
  ASSERT_TRUE(AwaitOnDisk(o, kA));
  // Now B can come back, into the slot A leaves, and it holds pool block 0's bytes.
  EXPECT_EQ(o.FetchFromLowerTier(chain, 0), 1);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!o.Contains(kB) && std::chrono::steady_clock::now() < end) {
    o.disk()->WaitForCompletion(20);
    o.Poll();
  }
  ASSERT_TRUE(o.Contains(kB));
  const std::optional<int> slot = o.host().Find(kB);
  ASSERT_TRUE(slot.has_value());
  EXPECT_EQ(std::memcmp(o.host().SlotData(*slot), pool.blocks[0].data(), kSlot), 0);
  // And A on disk is pool block 1's bytes: read it back into a buffer of our own.
  std::vector<std::byte> got(kSlot);
  ASSERT_TRUE(o.disk()->QueueRead(kA, got.data(), 99));
  bool read_ok = false;
  const auto end2 = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!read_ok && std::chrono::steady_clock::now() < end2) {
    o.disk()->WaitForCompletion(20);
    for (const auto& c : o.disk()->Poll()) read_ok = read_ok || (c.token == 99 && c.ok);
  }
  ASSERT_TRUE(read_ok);
  EXPECT_EQ(got, pool.blocks[1]);
}

// A sync that fails (a device error): the blocks whose copies it should have landed are dropped,
// never served or written through, and no slot stays pinned: the tier takes new blocks again.
TEST(OffloaderFailedSync, DropsWhatDidNotLandAndLeavesNoSlotPinned) {
  FakePool pool(4);
  KvOffloader o(pool.Copier(), kSlot, 2 * kSlot);  // two host slots, no disk
  const uint64_t kA = 0xa, kB = 0xb, kC = 0xc, kD = 0xd;
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{0, kA, 0}}, {}).ok());
  ASSERT_TRUE(o.BeforeForward({}, {}).ok());  // A landed
  ASSERT_TRUE(o.Contains(kA));
  // B's copy out and A's copy back (A pinned by the manager first) are in flight when sync fails.
  ASSERT_TRUE(o.Pin(kA));
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{1, kB, 0}}, std::vector<OnboardBlock>{{2, kA}}).ok());
  pool.fail_sync = true;
  ASSERT_TRUE(o.Pin(kA));  // the next step onboards A again: BeforeForward must unpin it on failure
  EXPECT_FALSE(o.BeforeForward({}, std::vector<OnboardBlock>{{3, kA}}).ok());
  EXPECT_FALSE(o.Contains(kB)) << "B's bytes never landed";
  EXPECT_TRUE(o.Contains(kA)) << "A's bytes were whole before the failed step";
  pool.fail_sync = false;
  // Nothing is pinned or held: two new blocks take both slots (evicting A).
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{0, kC, 0}, {1, kD, 0}}, {}).ok());
  ASSERT_TRUE(o.BeforeForward({}, {}).ok());
  EXPECT_TRUE(o.Contains(kC));
  EXPECT_TRUE(o.Contains(kD));
  EXPECT_FALSE(o.Contains(kA));
  EXPECT_EQ(o.host().num_unavailable(), 0);
}

}  // namespace
}  // namespace tandem::kvtier
