// The engine with a disk tier below the host tier (EngineConfig::kv_offload_disk_*,
// kvtier/disk_tier.h) on the real CPU runner and the bundled tiny Qwen3: a pool and a host tier
// small enough that later prompts push an earlier prompt's blocks out of both, then that prompt
// again. Its prefix must come back from the disk (fetched into the host tier while the request
// waits, then onboarded) with the same greedy tokens as its first run and as without any tier;
// a corrupted slab file is never served (the blocks are recomputed); a restarted engine with the
// same model finds the blocks an earlier one wrote, one with another model id does not.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "engine/engine.h"
#include "engine/kv_events.h"
#include "engine_test_util.h"
#include "kv_offload_test_util.h"

namespace tandem {
namespace {

using testing::Collected;
using testing::RunWaves;

constexpr int kBlock = testing::kOffloadBlock;
std::vector<int32_t> Prompt(int seed) { return testing::OffloadPrompt(seed); }

class KvOffloadDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tandem-kv-disk-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // A 14-block pool, a host tier of `host_blocks` blocks, and (disk_bytes > 0) a disk tier.
  std::unique_ptr<Engine> MakeEngine(int host_blocks, size_t disk_bytes, const std::string& model_id = "tiny") {
    auto runner = LoadCpuModelRunner(DefaultModelDir());
    EXPECT_TRUE(runner.ok()) << runner.status().ToString();
    if (!runner.ok()) return nullptr;
    EngineConfig c;
    c.block_size = kBlock;
    c.num_kv_blocks = 14;
    c.kv_offload_host_bytes = static_cast<size_t>(host_blocks) * SlotBytes();
    c.kv_offload_disk_dir = dir_ + "/kv";
    c.kv_offload_disk_bytes = disk_bytes;
    c.kv_offload_model_id = model_id;
    auto engine = Engine::Create(std::move(runner).value(), nullptr, c);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    return engine.ok() ? std::move(engine).value() : nullptr;
  }
  // One block of every layer as the runner stores it (what one host-tier slot holds): 1 GiB of
  // host tier over the number of slots it makes.
  static size_t SlotBytes() {
    static const size_t bytes = [] {
      auto runner = LoadCpuModelRunner(DefaultModelDir());
      EngineConfig c;
      c.block_size = kBlock;
      c.num_kv_blocks = 14;
      c.kv_offload_host_bytes = size_t{1} << 30;
      auto engine = Engine::Create(std::move(runner).value(), nullptr, c);
      const int64_t slots = (*engine)->Stats().kv_offload_host_capacity_blocks;
      return slots > 0 ? (size_t{1} << 30) / static_cast<size_t>(slots) : 0;
    }();
    return bytes;
  }
  std::string Slab() const { return dir_ + "/kv/tandem-kv.slab"; }

  std::string dir_;
};

// a1's 5 blocks leave the 14-block pool, then the 6-block host tier, for the disk.
const std::vector<std::vector<std::pair<std::string, int>>> kFirst = {
    {{"a1", 1}}, {{"b", 2}}, {{"c", 3}}, {{"d", 4}}, {{"e", 5}}, {{"f", 6}}, {{"g", 7}}};
const std::vector<std::vector<std::pair<std::string, int>>> kReturn = {{{"a2", 1}}};

TEST_F(KvOffloadDiskTest, APrefixPushedOutOfPoolAndHostComesBackFromDisk) {
  ASSERT_GT(SlotBytes(), 0u);
  auto none = MakeEngine(0, 0);
  auto host_only = MakeEngine(6, 0);
  auto disk = MakeEngine(6, 64u << 20);
  ASSERT_TRUE(none && host_only && disk);
  auto got_none = RunWaves(*none, kFirst);
  got_none = RunWaves(*none, kReturn, std::move(got_none));
  auto got_host = RunWaves(*host_only, kFirst);
  got_host = RunWaves(*host_only, kReturn, std::move(got_host));
  auto got_disk = RunWaves(*disk, kFirst);
  got_disk = RunWaves(*disk, kReturn, std::move(got_disk));
  for (const auto& [id, c] : got_none) {
    ASSERT_TRUE(got_disk.count(id)) << id;
    EXPECT_EQ(got_disk.at(id).token_ids, c.token_ids) << id;
    EXPECT_EQ(got_host.at(id).token_ids, c.token_ids) << id;
  }
  EXPECT_EQ(got_disk.at("a2").token_ids, got_disk.at("a1").token_ids);
  // The host tier alone lost a1's blocks; the disk kept them.
  EXPECT_LT(got_host.at("a2").num_cached_tokens, 5 * kBlock);
  EXPECT_EQ(got_disk.at("a2").num_cached_tokens, 5 * kBlock);
  const EngineStats s = disk->Stats();
  EXPECT_GT(s.kv_offload_disk_written_blocks, 0u);
  EXPECT_GE(s.kv_offload_fetched_blocks, 1u);
  EXPECT_EQ(s.kv_offload_disk_corrupt, 0u);
  EXPECT_EQ(s.num_kv_blocks_used, 0);
}

TEST_F(KvOffloadDiskTest, APrefixLongerThanTheHostTierBringsBackWhatFits) {
  // A host tier of 3 blocks and a 5-block prefix on disk: 3 come back (the first ones of the
  // chain, not evicting each other), the other 2 are recomputed, the tokens are the same.
  {
    auto disk = MakeEngine(6, 64u << 20);
    ASSERT_TRUE(disk);
    (void)RunWaves(*disk, kFirst);
  }
  auto none = MakeEngine(0, 0);
  auto small = MakeEngine(3, 64u << 20);
  ASSERT_TRUE(none && small);
  const auto want = RunWaves(*none, kReturn);
  const auto got = RunWaves(*small, kReturn);
  EXPECT_EQ(got.at("a2").token_ids, want.at("a2").token_ids);
  EXPECT_EQ(got.at("a2").num_cached_tokens, 3 * kBlock);
  EXPECT_EQ(small->Stats().kv_offload_fetched_blocks, 3u);
}

TEST_F(KvOffloadDiskTest, ACorruptedSlabIsRecomputedNotServed) {
  auto none = MakeEngine(0, 0);
  ASSERT_TRUE(none);
  auto got_none = RunWaves(*none, kFirst);
  got_none = RunWaves(*none, kReturn, std::move(got_none));
  {
    auto disk = MakeEngine(6, 64u << 20);
    ASSERT_TRUE(disk);
    (void)RunWaves(*disk, kFirst);
  }
  // Every block's bytes change on disk (its header and checksum stay): a torn or bit-rotted file.
  {
    std::fstream f(Slab(), std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekg(0, std::ios::end);
    const std::streamoff size = f.tellg();
    const std::streamoff stride = static_cast<std::streamoff>(4096 + ((SlotBytes() + 4095) / 4096) * 4096);
    for (std::streamoff off = 4096 + 4096 + 17; off < size; off += stride) {
      f.seekp(off);
      f.put('\x5a');
    }
  }
  auto disk = MakeEngine(6, 64u << 20);  // a restart: the blocks are recovered by their headers
  ASSERT_TRUE(disk);
  ASSERT_GT(disk->Stats().kv_offload_disk_blocks, 0);
  const auto got = RunWaves(*disk, kReturn);
  EXPECT_EQ(got.at("a2").token_ids, got_none.at("a2").token_ids);
  EXPECT_EQ(got.at("a2").num_cached_tokens, 0);
  EXPECT_GE(disk->Stats().kv_offload_disk_corrupt, 1u);
  EXPECT_EQ(disk->Stats().kv_offload_fetched_blocks, 0u);
}

TEST_F(KvOffloadDiskTest, ARestartedEngineFindsTheBlocksOfTheSameModelOnly) {
  {
    auto disk = MakeEngine(6, 64u << 20);
    ASSERT_TRUE(disk);
    (void)RunWaves(*disk, kFirst);
  }
  auto again = MakeEngine(6, 64u << 20);
  ASSERT_TRUE(again);
  auto got = RunWaves(*again, kReturn);
  EXPECT_EQ(got.at("a2").num_cached_tokens, 5 * kBlock);
  again.reset();
  auto other = MakeEngine(6, 64u << 20, "another model");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->Stats().kv_offload_disk_blocks, 0);
  got = RunWaves(*other, kReturn);
  EXPECT_EQ(got.at("a2").num_cached_tokens, 0);
}

// Collects an engine's KV event batches.
struct Collect : KvEventSink {
  std::vector<KvEvent> events;
  void OnStep(KvEventBatch batch) override {
    for (KvEvent& e : batch.events) events.push_back(std::move(e));
  }
};

TEST_F(KvOffloadDiskTest, KvEventsNameEachTierAndReplayToTheSnapshot) {
  auto engine = MakeEngine(6, 64u << 20);
  ASSERT_TRUE(engine);
  auto sink = std::make_shared<Collect>();
  engine->SetKvEventSink(sink);
  auto got = RunWaves(*engine, kFirst);
  got = RunWaves(*engine, kReturn, std::move(got));
  const KvCacheSnapshot snap = engine->SnapshotCachedBlocks();
  // Replay per tier: every stored block stored once per tier before it is removed from it.
  std::set<std::pair<int, uint64_t>> cached;
  std::map<int, int> stored_by_tier, removed_by_tier;
  uint64_t last = 0;
  for (const KvEvent& e : sink->events) {
    ASSERT_EQ(e.event_id, last + 1);
    last = e.event_id;
    if (const auto* s = std::get_if<KvStoredEvent>(&e.data)) {
      for (uint64_t h : s->block_hashes) {
        EXPECT_TRUE(cached.insert({static_cast<int>(s->tier), h}).second) << KvTierName(s->tier);
        ++stored_by_tier[static_cast<int>(s->tier)];
      }
    } else if (const auto* r = std::get_if<KvRemovedEvent>(&e.data)) {
      for (uint64_t h : r->block_hashes) {
        EXPECT_EQ(cached.erase({static_cast<int>(r->tier), h}), 1u) << KvTierName(r->tier);
        ++removed_by_tier[static_cast<int>(r->tier)];
      }
    }
  }
  std::set<std::pair<int, uint64_t>> in_snapshot;
  for (const KvCachedBlock& b : snap.blocks) in_snapshot.insert({static_cast<int>(b.tier), b.block_hash});
  EXPECT_EQ(in_snapshot, cached);
  EXPECT_EQ(snap.last_event_id, last);
  EXPECT_GT(stored_by_tier[static_cast<int>(KvTier::kHost)], 6);   // more than the host tier holds
  EXPECT_GT(removed_by_tier[static_cast<int>(KvTier::kHost)], 0);  // so some left it
  EXPECT_GT(stored_by_tier[static_cast<int>(KvTier::kDisk)], 0);
  EXPECT_EQ(got.at("a2").num_cached_tokens, 5 * kBlock);
}

TEST_F(KvOffloadDiskTest, ADiskTierThatCannotOpenLeavesTheEngineServing) {
  // The directory's parent is a regular file: no disk tier, the host tier works as before.
  std::ofstream(dir_ + "/kv") << "not a directory";
  auto disk = MakeEngine(6, 64u << 20);
  ASSERT_TRUE(disk);
  auto got = RunWaves(*disk, kFirst);
  got = RunWaves(*disk, kReturn, std::move(got));
  EXPECT_EQ(got.at("a2").token_ids, got.at("a1").token_ids);
  EXPECT_EQ(disk->Stats().kv_offload_disk_capacity_blocks, 0);
}

}  // namespace
}  // namespace tandem
