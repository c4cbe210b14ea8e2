// KvOffloader with asynchronous onboarding (PoolCopier::onboard_start / onboard_poll, what a GPU
// runner's side stream gives), on a fake pool in host memory whose onboard copies land only when
// the test says so: the pool blocks keep their old bytes until then, the tier's blocks stay pinned
// (no new block can take their slots), what landed is counted with the copies' own seconds, and a
// failed start or copy gives back every block it concerned.
#include <cstring>
#include <deque>
#include <vector>

#include <gtest/gtest.h>

#include "kvtier/offloader.h"

namespace tandem::kvtier {
namespace {

constexpr size_t kSlot = 4096;

struct FakePool {
  explicit FakePool(int n) : blocks(n, std::vector<std::byte>(kSlot)) {
    for (int b = 0; b < n; ++b) {
      for (size_t i = 0; i < kSlot; ++i) blocks[b][i] = std::byte(static_cast<unsigned char>(b * 31 + i));
    }
  }
  struct Flight {
    uint64_t ticket;
    std::vector<KvBlockCopy> copies;
  };
  PoolCopier Copier() {
    PoolCopier c;
    c.async = false;  // evicted blocks: copied at once (memcpy), as a host pool
    c.copy = [this](std::span<const KvBlockCopy> copies) {
      for (const KvBlockCopy& k : copies) Apply(k);
      return Status::Ok();
    };
    c.onboard_start = [this](std::span<const KvBlockCopy> copies, uint64_t* ticket) {
      if (fail_start) return Status(StatusCode::kInternal, "the side stream refused the copy");
      flights.push_back({++next, {copies.begin(), copies.end()}});
      *ticket = next;
      return Status::Ok();
    };
    c.onboard_poll = [this](uint64_t ticket, bool wait, bool* landed, double* seconds) {
      ++polls;
      waits += wait ? 1 : 0;
      if (fail_poll) return Status(StatusCode::kInternal, "the copy kernel failed");
      *landed = false;
      if (!wait && ticket > release_through) return Status::Ok();
      for (auto it = flights.begin(); it != flights.end(); ++it) {
        if (it->ticket != ticket) continue;
        for (const KvBlockCopy& k : it->copies) Apply(k);
        flights.erase(it);
        *landed = true;
        *seconds = 0.25;
        return Status::Ok();
      }
      return Status(StatusCode::kInvalidArgument, "unknown ticket");
    };
    return c;
  }
  void Apply(const KvBlockCopy& k) {
    if (k.to_host) std::memcpy(k.host, blocks[k.block_id].data(), kSlot);
    else std::memcpy(blocks[k.block_id].data(), k.host, kSlot);
  }
  std::vector<std::vector<std::byte>> blocks;
  std::deque<Flight> flights;
  uint64_t next = 0, release_through = 0;
  int polls = 0, waits = 0;
  bool fail_start = false, fail_poll = false;
};

TEST(OffloaderAsyncOnboard, BlocksLandOnlyWhenTheCopyDidAndStayPinnedUntilThen) {
  FakePool pool(4);
  KvOffloader o(pool.Copier(), kSlot, 2 * kSlot);  // two host slots
  ASSERT_TRUE(o.async_onboard());
  const uint64_t kA = 0xa, kB = 0xb, kC = 0xc;
  const std::vector<std::byte> a_bytes = pool.blocks[0];
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{0, kA, 0}}, {}).ok());
  ASSERT_TRUE(o.Contains(kA));
  // A goes back into pool block 3 (the manager pins it first).
  ASSERT_TRUE(o.Pin(kA));
  ASSERT_TRUE(o.BeforeForward({}, std::vector<OnboardBlock>{{3, kA}}).ok());
  EXPECT_TRUE(o.onboarding());
  std::vector<int> landed;
  ASSERT_TRUE(o.TakeLanded(false, &landed).ok());
  EXPECT_TRUE(landed.empty());
  EXPECT_NE(pool.blocks[3], a_bytes);  // not there yet
  EXPECT_EQ(o.stats().onboarded_blocks, 0u);
  // While in flight A's slot is pinned: B and C, evicted now, find one slot free, not two.
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{1, kB, 0}, {2, kC, 0}}, {}).ok());
  EXPECT_TRUE(o.Contains(kA));
  EXPECT_EQ(o.Contains(kB) + o.Contains(kC), 1);
  pool.release_through = 1;
  ASSERT_TRUE(o.TakeLanded(false, &landed).ok());
  EXPECT_EQ(landed, std::vector<int>{3});
  EXPECT_FALSE(o.onboarding());
  EXPECT_EQ(pool.blocks[3], a_bytes);
  const OffloadStats s = o.stats();
  EXPECT_EQ(s.onboarded_blocks, 1u);
  EXPECT_EQ(s.onboarded_bytes, kSlot);
  EXPECT_DOUBLE_EQ(s.onboard_seconds, 0.25);
  // Unpinned now: the next eviction takes A's slot (the least recently used; pinned, B's would go).
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{2, 0xd, 0}}, {}).ok());
  EXPECT_TRUE(o.Contains(0xd));
  EXPECT_FALSE(o.Contains(kA));
  EXPECT_TRUE(o.Contains(kB));
}

TEST(OffloaderAsyncOnboard, WaitLandsTheOldestAndLaterStepsKeepTheirOrder) {
  FakePool pool(6);
  KvOffloader o(pool.Copier(), kSlot, 4 * kSlot);
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{0, 1, 0}, {1, 2, 0}}, {}).ok());
  ASSERT_TRUE(o.Pin(1) && o.Pin(2));
  ASSERT_TRUE(o.BeforeForward({}, std::vector<OnboardBlock>{{4, 1}}).ok());
  ASSERT_TRUE(o.BeforeForward({}, std::vector<OnboardBlock>{{5, 2}}).ok());
  std::vector<int> landed;
  ASSERT_TRUE(o.TakeLanded(/*wait=*/true, &landed).ok());
  EXPECT_EQ(landed, std::vector<int>{4});  // the oldest, waited for; the second not released yet
  EXPECT_EQ(pool.waits, 1);
  EXPECT_TRUE(o.onboarding());
  pool.release_through = 2;
  ASSERT_TRUE(o.TakeLanded(false, &landed).ok());
  EXPECT_EQ(landed, (std::vector<int>{4, 5}));
  EXPECT_EQ(pool.blocks[5], pool.blocks[1]);
}

TEST(OffloaderAsyncOnboard, AStartThatFailsStartsNothingAndUnpins) {
  FakePool pool(4);
  KvOffloader o(pool.Copier(), kSlot, kSlot);  // one host slot
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{0, 0xa, 0}}, {}).ok());
  ASSERT_TRUE(o.Pin(0xa));
  pool.fail_start = true;
  EXPECT_FALSE(o.BeforeForward({}, std::vector<OnboardBlock>{{2, 0xa}}).ok());
  EXPECT_FALSE(o.onboarding());
  // Unpinned: the only slot can be taken by the next evicted block.
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{1, 0xb, 0}}, {}).ok());
  EXPECT_TRUE(o.Contains(0xb));
  EXPECT_FALSE(o.Contains(0xa));
}

TEST(OffloaderAsyncOnboard, ABlockMissingFromTheTierStartsNoCopy) {
  FakePool pool(4);
  KvOffloader o(pool.Copier(), kSlot, 2 * kSlot);
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{0, 0xa, 0}}, {}).ok());
  ASSERT_TRUE(o.Pin(0xa));
  EXPECT_FALSE(o.BeforeForward({}, std::vector<OnboardBlock>{{2, 0xa}, {3, 0xdead}}).ok());
  EXPECT_FALSE(o.onboarding());
  EXPECT_TRUE(pool.flights.empty());
}

TEST(OffloaderAsyncOnboard, ACopyThatFailsGivesBackEveryBlockInFlightUncounted) {
  FakePool pool(6);
  KvOffloader o(pool.Copier(), kSlot, 2 * kSlot);  // two host slots
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{0, 0xa, 0}, {1, 0xb, 0}}, {}).ok());
  ASSERT_TRUE(o.Pin(0xa) && o.Pin(0xb));
  ASSERT_TRUE(o.BeforeForward({}, std::vector<OnboardBlock>{{3, 0xa}}).ok());
  ASSERT_TRUE(o.BeforeForward({}, std::vector<OnboardBlock>{{4, 0xb}}).ok());
  pool.fail_poll = true;
  std::vector<int> landed;
  EXPECT_FALSE(o.TakeLanded(false, &landed).ok());
  EXPECT_EQ(landed, (std::vector<int>{3, 4}));
  EXPECT_FALSE(o.onboarding());
  EXPECT_EQ(o.stats().onboarded_blocks, 0u);
  // No slot stays pinned: two new blocks take both slots.
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{2, 0xc, 0}, {5, 0xd, 0}}, {}).ok());
  EXPECT_TRUE(o.Contains(0xc) && o.Contains(0xd));
}

TEST(OffloaderAsyncOnboard, TheDestructorWaitsForTheCopiesInFlight) {
  FakePool pool(4);
  {
    KvOffloader o(pool.Copier(), kSlot, 2 * kSlot);
    ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{0, 0xa, 0}}, {}).ok());
    ASSERT_TRUE(o.Pin(0xa));
    ASSERT_TRUE(o.BeforeForward({}, std::vector<OnboardBlock>{{2, 0xa}}).ok());
  }
  EXPECT_EQ(pool.waits, 1);
  EXPECT_TRUE(pool.flights.empty());
  EXPECT_EQ(pool.blocks[2], pool.blocks[0]);
}

// Layer-wise onboarding (PoolCopier::layered): the onboard copies go that way, not through
// `copy`; like the step's other asynchronous copies they have landed at the next step's sync, the
// tier's blocks stay pinned until then, and onboard_seconds is the device's time, not the enqueueing.
TEST(OffloaderLayeredOnboard, CopiesGoLayerwiseStayPinnedUntilTheSyncAndAreTimedByTheDevice) {
  FakePool pool(4);
  std::vector<KvBlockCopy> pending;
  int layered_calls = 0, copy_onboards = 0;
  PoolCopier c;
  c.async = true;
  c.time_onboard = true;  // ignored for layer-wise copies: the step must not wait for them here
  c.copy = [&](std::span<const KvBlockCopy> copies) {
    for (const KvBlockCopy& k : copies) copy_onboards += k.to_host ? 0 : 1;
    pending.insert(pending.end(), copies.begin(), copies.end());
    return Status::Ok();
  };
  int syncs = 0;
  c.sync = [&] {
    ++syncs;
    for (const KvBlockCopy& k : pending) pool.Apply(k);
    pending.clear();
    return Status::Ok();
  };
  c.layered = [&](std::span<const KvBlockCopy> copies) {
    ++layered_calls;
    pending.insert(pending.end(), copies.begin(), copies.end());
    return Status::Ok();
  };
  int timed = 0;  // as the runner: each finished layer-wise onboarding's seconds, once
  c.layered_seconds = [&] {
    const double seconds = 0.5 * (layered_calls - timed);
    timed = layered_calls;
    return KvCopySeconds{0.25 * seconds, seconds};
  };
  KvOffloader o(std::move(c), kSlot, 2 * kSlot);
  EXPECT_FALSE(o.async_onboard());  // no landing: the step itself uses the blocks
  const std::vector<std::byte> a_bytes = pool.blocks[0];
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{0, 0xa, 0}}, {}).ok());
  ASSERT_TRUE(o.BeforeForward({}, {}).ok());  // A's copy out lands
  ASSERT_TRUE(o.Pin(0xa));
  const int syncs_before = syncs;
  ASSERT_TRUE(o.BeforeForward({}, std::vector<OnboardBlock>{{3, 0xa}}).ok());
  EXPECT_EQ(syncs, syncs_before);  // not waited for
  EXPECT_EQ(layered_calls, 1);
  EXPECT_EQ(copy_onboards, 0);
  EXPECT_EQ(o.stats().onboard_seconds, 0.0);
  EXPECT_EQ(o.host().num_unavailable(), 1);  // A's slot, pinned while the copy may read it
  EXPECT_NE(pool.blocks[3], a_bytes);
  // The next step's sync lands it and unpins A.
  ASSERT_TRUE(o.BeforeForward({}, {}).ok());
  EXPECT_EQ(syncs, syncs_before + 1);
  EXPECT_EQ(pool.blocks[3], a_bytes);
  EXPECT_EQ(o.host().num_unavailable(), 0);
  const OffloadStats s = o.stats();
  EXPECT_EQ(s.onboarded_blocks, 1u);
  EXPECT_DOUBLE_EQ(s.onboard_seconds, 0.5);
}

// Layer-wise evictions: with PoolCopier::layered the evicted blocks' copies of a step that onboards
// (or evicts kLayeredEvictMinBlocks or more) go with the layer-wise copies, ahead of the onboard
// ones, instead of through `copy`; fewer evicted blocks alone still go through `copy`. The fake
// side stream applies a call's copies out of the pool before its copies into it, as the runner
// does layer by layer, and only at the next sync.
struct LayeredPool {
  explicit LayeredPool(int n) : pool(n) {}
  PoolCopier Copier() {
    PoolCopier c;
    c.async = true;
    c.copy = [this](std::span<const KvBlockCopy> copies) {
      copy_calls.emplace_back(copies.begin(), copies.end());
      pending.insert(pending.end(), copies.begin(), copies.end());
      return Status::Ok();
    };
    c.sync = [this] {
      for (bool out : {true, false}) {
        for (const KvBlockCopy& k : pending) {
          if (k.to_host == out) pool.Apply(k);
        }
      }
      pending.clear();
      return Status::Ok();
    };
    c.layered = [this](std::span<const KvBlockCopy> copies) {
      if (fail_layered) return Status(StatusCode::kInternal, "the side stream failed");
      layered_calls.emplace_back(copies.begin(), copies.end());
      pending.insert(pending.end(), copies.begin(), copies.end());
      return Status::Ok();
    };
    c.layered_seconds = [this] {
      const KvCopySeconds t{0.125 * static_cast<double>(layered_calls.size() - timed),
                            0.5 * static_cast<double>(layered_calls.size() - timed)};
      timed = layered_calls.size();
      return t;
    };
    return c;
  }
  FakePool pool;
  std::vector<KvBlockCopy> pending;
  std::vector<std::vector<KvBlockCopy>> copy_calls, layered_calls;
  size_t timed = 0;
  bool fail_layered = false;
};

TEST(OffloaderLayeredEvict, EvictedBlocksGoLayerwiseWithTheOnboardCopiesOutFirst) {
  LayeredPool p(4);
  KvOffloader o(p.Copier(), kSlot, 4 * kSlot);
  const std::vector<std::byte> a_bytes = p.pool.blocks[0], b_bytes = p.pool.blocks[2];
  // Step 1: A (block 0) evicted alone, one block: ahead of the step, through `copy`.
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{0, 0xa, 0}}, {}).ok());
  EXPECT_EQ(p.copy_calls.size(), 1u);
  EXPECT_TRUE(p.layered_calls.empty());
  ASSERT_TRUE(o.BeforeForward({}, {}).ok());  // lands
  // Step 2: B (block 2) evicted, and A onboarded into that same block 2.
  ASSERT_TRUE(o.Pin(0xa));
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{2, 0xb, 0}}, std::vector<OnboardBlock>{{2, 0xa}}).ok());
  EXPECT_EQ(p.copy_calls.size(), 1u);  // nothing more through `copy`
  ASSERT_EQ(p.layered_calls.size(), 1u);
  ASSERT_EQ(p.layered_calls[0].size(), 2u);
  EXPECT_TRUE(p.layered_calls[0][0].to_host);  // B out, then A in
  EXPECT_EQ(p.layered_calls[0][0].block_id, 2);
  EXPECT_FALSE(p.layered_calls[0][1].to_host);
  EXPECT_EQ(p.layered_calls[0][1].block_id, 2);
  EXPECT_TRUE(o.Contains(0xb));
  ASSERT_TRUE(o.BeforeForward({}, {}).ok());  // the sync lands both
  EXPECT_EQ(p.pool.blocks[2], a_bytes);
  // B's old bytes are in the tier: onboarding it into block 3 brings them back.
  ASSERT_TRUE(o.Pin(0xb));
  ASSERT_TRUE(o.BeforeForward({}, std::vector<OnboardBlock>{{3, 0xb}}).ok());
  ASSERT_TRUE(o.BeforeForward({}, {}).ok());
  EXPECT_EQ(p.pool.blocks[3], b_bytes);
  const OffloadStats s = o.stats();
  EXPECT_EQ(s.offloaded_blocks, 2u);
  EXPECT_EQ(s.onboarded_blocks, 2u);
  // Two layer-wise calls timed by the device: 0.125 s out and 0.5 s in each; plus step 1's
  // enqueueing time for its copy through `copy`.
  EXPECT_DOUBLE_EQ(s.onboard_seconds, 1.0);
  EXPECT_GE(s.offload_seconds, 0.25);
  EXPECT_LT(s.offload_seconds, 0.3);
}

TEST(OffloaderLayeredEvict, ManyEvictedBlocksAloneGoLayerwise) {
  LayeredPool p(static_cast<int>(kLayeredEvictMinBlocks) + 1);
  KvOffloader o(p.Copier(), kSlot, (kLayeredEvictMinBlocks + 1) * kSlot);
  std::vector<EvictedBlock> few, many;
  for (size_t i = 0; i + 1 < kLayeredEvictMinBlocks; ++i) few.push_back({static_cast<int>(i), 0x100 + i, 0});
  ASSERT_TRUE(o.BeforeForward(few, {}).ok());
  EXPECT_EQ(p.copy_calls.size(), 1u);
  EXPECT_TRUE(p.layered_calls.empty());
  for (size_t i = 0; i < kLayeredEvictMinBlocks; ++i) many.push_back({static_cast<int>(i), 0x200 + i, 0});
  ASSERT_TRUE(o.BeforeForward(many, {}).ok());
  EXPECT_EQ(p.copy_calls.size(), 1u);
  ASSERT_EQ(p.layered_calls.size(), 1u);
  EXPECT_EQ(p.layered_calls[0].size(), kLayeredEvictMinBlocks);
  ASSERT_TRUE(o.BeforeForward({}, {}).ok());
  for (size_t i = 0; i < kLayeredEvictMinBlocks; ++i) EXPECT_TRUE(o.Contains(0x200 + i)) << i;
}

TEST(OffloaderLayeredEvict, AFailedLayerwiseCopyKeepsNoEvictedBlockAndUnpinsTheOnboarded) {
  LayeredPool p(4);
  KvOffloader o(p.Copier(), kSlot, 4 * kSlot);
  ASSERT_TRUE(o.BeforeForward(std::vector<EvictedBlock>{{0, 0xa, 0}}, {}).ok());
  ASSERT_TRUE(o.BeforeForward({}, {}).ok());
  ASSERT_TRUE(o.Pin(0xa));
  p.fail_layered = true;
  const Status st =
      o.BeforeForward(std::vector<EvictedBlock>{{2, 0xb, 0}}, std::vector<OnboardBlock>{{3, 0xa}});
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(o.Contains(0xb));  // its bytes never left the pool: not served
  EXPECT_TRUE(o.Contains(0xa));
  p.fail_layered = false;
  ASSERT_TRUE(o.BeforeForward({}, {}).ok());
  EXPECT_EQ(o.host().num_unavailable(), 0);  // A unpinned, B's slot given back
  EXPECT_EQ(o.stats().offloaded_blocks, 1u);
  EXPECT_EQ(o.stats().onboarded_blocks, 0u);
}

}  // namespace
}  // namespace tandem::kvtier
