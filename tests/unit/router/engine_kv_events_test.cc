// KV events from a real Engine (over the fake model runner of tests/unit/engine): numbered without
// holes, batched per step with the load, and replaying them gives exactly the engine's cached
// blocks (its snapshot); a router fed through a lossy queue resyncs; AsyncEngine's snapshot.
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../engine/fake_model_runner.h"
#include "common/file_util.h"
#include "engine/async_engine.h"
#include "engine/block_hash.h"
#include "engine/engine.h"
#include "engine/kv_events.h"
#include "model/model_runner.h"
#include "router/kv_router.h"

namespace tandem {
namespace {

// Applies events to a set of hashes, checking ids are consecutive and chains are well formed.
struct Replay {
  std::set<uint64_t> cached;
  std::map<uint64_t, uint64_t> parent_of;
  uint64_t last_event_id = 0;
  int num_stored = 0, num_removed = 0, num_cleared = 0;

  void Apply(const std::vector<KvEvent>& events) {
    for (const KvEvent& e : events) {
      ASSERT_EQ(e.event_id, last_event_id + 1);
      last_event_id = e.event_id;
      if (const auto* s = std::get_if<KvStoredEvent>(&e.data)) {
        ASSERT_FALSE(s->block_hashes.empty());
        uint64_t parent = s->parent_hash;
        for (uint64_t h : s->block_hashes) {
          EXPECT_TRUE(cached.insert(h).second) << "stored twice without a remove";
          parent_of[h] = parent;
          parent = h;
          ++num_stored;
        }
      } else if (const auto* r = std::get_if<KvRemovedEvent>(&e.data)) {
        for (uint64_t h : r->block_hashes) {
          EXPECT_EQ(cached.erase(h), 1u) << "removed a hash that was not stored";
          ++num_removed;
        }
      } else {
        cached.clear();
        ++num_cleared;
      }
    }
  }
  void ExpectEquals(const KvCacheSnapshot& snapshot) const {
    std::set<uint64_t> snap;
    for (const KvCachedBlock& b : snapshot.blocks) {
      snap.insert(b.block_hash);
      auto it = parent_of.find(b.block_hash);
      ASSERT_NE(it, parent_of.end());
      EXPECT_EQ(b.parent_hash, it->second);
    }
    EXPECT_EQ(snap, cached);
    EXPECT_EQ(snapshot.last_event_id, last_event_id);
  }
};

std::unique_ptr<Engine> MakeEngine(int num_blocks, int block_size = 4) {
  EngineConfig config;
  config.block_size = block_size;
  config.num_kv_blocks = num_blocks;
  config.max_num_batched_tokens = 64;  // chunked prefill over several steps
  config.max_num_seqs = 4;
  auto e = Engine::Create(std::make_unique<testing::FakeModelRunner>(512, 4096), nullptr, config);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

// Multi-turn chats over a few shared system prompts.
std::vector<int32_t> ChatPrompt(std::mt19937& rng, int system, int turn_len) {
  std::vector<int32_t> p;
  for (int i = 0; i < 12 + 4 * system; ++i) p.push_back(system * 50 + i);
  for (int i = 0; i < turn_len; ++i) p.push_back(static_cast<int32_t>(rng() % 500));
  return p;
}

SamplingParams Greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

TEST(EngineKvEventsTest, ReplayedEventsEqualTheSnapshotAfterEveryStep) {
  auto engine = MakeEngine(/*num_blocks=*/40);  // small: evictions happen
  auto queue = std::make_shared<KvEventQueue>();
  engine->SetKvEventSink(queue);
  std::mt19937 rng(3);
  Replay replay;
  int next_id = 0, num_steps = 0;
  for (int round = 0; round < 40; ++round) {
    for (int k = 0; k < 2; ++k) {
      const std::string id = "r" + std::to_string(next_id++);
      ASSERT_TRUE(engine->AddRequest(id, ChatPrompt(rng, rng() % 3, 2 + rng() % 30), Greedy(5)).ok());
    }
    if (round % 7 == 3) engine->AbortRequest("r" + std::to_string(next_id - 1));
    for (int s = 0; s < 4 && engine->HasUnfinishedRequests(); ++s) {
      engine->Step();
      ++num_steps;
      KvEventQueue::Drained d = queue->Drain();
      ASSERT_TRUE(d.has_load);  // one batch per step, with the load
      EXPECT_EQ(d.num_dropped_events, 0u);
      const EngineStats stats = engine->Stats();
      EXPECT_EQ(d.load.num_active_blocks, stats.num_kv_blocks_used);
      EXPECT_EQ(d.load.num_total_blocks, 40);
      EXPECT_EQ(d.load.num_waiting, stats.num_waiting);
      EXPECT_EQ(d.load.num_running, stats.num_running);
      replay.Apply(d.events);
      if (HasFatalFailure()) return;
      replay.ExpectEquals(engine->SnapshotCachedBlocks());
    }
  }
  while (engine->HasUnfinishedRequests()) engine->Step();
  replay.Apply(queue->Drain().events);
  replay.ExpectEquals(engine->SnapshotCachedBlocks());
  EXPECT_GT(replay.num_stored, 40);
  EXPECT_GT(replay.num_removed, 0);  // the pool was too small to keep everything
  EXPECT_GT(num_steps, 40);
  // Stored hashes are the chained hashes of the prompts (block_hash.h): the first block of
  // system prompt 0 must be among the events.
  std::vector<int32_t> first_block;
  for (int i = 0; i < 4; ++i) first_block.push_back(i);
  EXPECT_TRUE(replay.parent_of.count(HashBlock(0, first_block)));
}

// The bundled tiny Qwen3 on the CPU runner: two chats sharing a system prompt; the second finds
// the first's blocks (a prefix hit) and the events describe exactly the engine's cache.
TEST(EngineKvEventsTest, RealModelEventsMatchItsCache) {
  auto runner = LoadCpuModelRunner(DefaultModelDir());
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  EngineConfig config;
  config.block_size = 16;
  config.num_kv_blocks = 64;
  auto created = Engine::Create(std::move(runner).value(), nullptr, config);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Engine& engine = **created;
  auto queue = std::make_shared<KvEventQueue>();
  engine.SetKvEventSink(queue);
  std::vector<int32_t> system;
  for (int i = 0; i < 40; ++i) system.push_back(1000 + 7 * i);
  std::vector<int32_t> chat1 = system, chat2 = system;
  for (int i = 0; i < 9; ++i) chat1.push_back(5000 + i);
  for (int i = 0; i < 25; ++i) chat2.push_back(9000 + i);
  Replay replay;
  ASSERT_TRUE(engine.AddRequest("chat1", chat1, Greedy(4)).ok());
  while (engine.HasUnfinishedRequests()) engine.Step();
  ASSERT_TRUE(engine.AddRequest("chat2", chat2, Greedy(4)).ok());
  int cached_tokens = 0;
  while (engine.HasUnfinishedRequests()) {
    for (const RequestOutput& out : engine.Step()) cached_tokens = out.num_cached_tokens;
  }
  replay.Apply(queue->Drain().events);
  replay.ExpectEquals(engine.SnapshotCachedBlocks());
  EXPECT_EQ(cached_tokens, 32);  // the system prompt's two full blocks
  const std::vector<uint64_t> h1 = ComputeBlockHashes(chat1, 16), h2 = ComputeBlockHashes(chat2, 16);
  for (uint64_t h : h1) EXPECT_TRUE(replay.cached.count(h));
  for (uint64_t h : h2) EXPECT_TRUE(replay.cached.count(h));
  // The 2 shared blocks, chat1's third (49 + 3 computed tokens), chat2's third and fourth.
  EXPECT_EQ(replay.cached.size(), 5u);
}

TEST(EngineKvEventsTest, NoSinkRecordsNothing) {
  auto engine = MakeEngine(64);
  std::mt19937 rng(1);
  ASSERT_TRUE(engine->AddRequest("a", ChatPrompt(rng, 0, 9), Greedy(3)).ok());
  while (engine->HasUnfinishedRequests()) engine->Step();
  KvCacheSnapshot s = engine->SnapshotCachedBlocks();
  EXPECT_EQ(s.last_event_id, 0u);
  EXPECT_FALSE(s.blocks.empty());  // the cache itself works as before
}

TEST(EngineKvEventsTest, RouterBehindALossyQueueResyncsFromTheSnapshot) {
  auto engine = MakeEngine(/*num_blocks=*/48);
  auto queue = std::make_shared<KvEventQueue>(/*max_events=*/2);  // drops whole batches
  engine->SetKvEventSink(queue);
  router::KvRouterConfig config;
  config.block_size = 4;
  router::KvRouter router(config);
  ASSERT_TRUE(router.AddWorker("w0").ok());
  std::mt19937 rng(5);
  int num_resyncs = 0;
  uint64_t dropped = 0;
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(engine->AddRequest("r" + std::to_string(i), ChatPrompt(rng, i % 3, rng() % 40),
                                   Greedy(4)).ok());
    for (int s = 0; s < 3 && engine->HasUnfinishedRequests(); ++s) {
      engine->Step();
      if (s == 1) continue;  // a slow consumer: two steps pile up
      KvEventQueue::Drained d = queue->Drain();
      dropped += d.num_dropped_events;
      auto applied = router.ApplyEvents("w0", d.events);
      ASSERT_TRUE(applied.ok());
      if (applied->needs_snapshot || d.num_dropped_events > 0) {
        ++num_resyncs;
        auto r = router.ApplySnapshot("w0", engine->SnapshotCachedBlocks());
        ASSERT_TRUE(r.ok());
        // What the snapshot flushed to the queue is older than the snapshot: stale.
        auto after = router.ApplyEvents("w0", queue->Drain().events);
        ASSERT_TRUE(after.ok());
        EXPECT_FALSE(after->needs_snapshot);
      }
      if (d.has_load) {
        ASSERT_TRUE(router.UpdateLoad("w0", d.load).ok());
      }
      // In sync: the router's blocks are the engine's, and a prompt's overlap is the engine's
      // cached prefix of it.
      const KvCacheSnapshot snap = engine->SnapshotCachedBlocks();
      auto after = router.ApplyEvents("w0", queue->Drain().events);
      ASSERT_TRUE(after.ok());
      ASSERT_FALSE(after->needs_snapshot);
      std::set<uint64_t> cached;
      for (const auto& b : snap.blocks) cached.insert(b.block_hash);
      ASSERT_EQ(router.Workers()[0].num_cached_blocks, cached.size());
      const std::vector<uint64_t> probe = ComputeBlockHashes(ChatPrompt(rng, i % 3, 8), 4);
      int expect = 0;
      while (expect < static_cast<int>(probe.size()) && cached.count(probe[expect])) ++expect;
      EXPECT_EQ(router.Overlaps(probe)[0].second, expect);
    }
  }
  EXPECT_GT(dropped, 0u);
  EXPECT_GT(num_resyncs, 0);
}

TEST(EngineKvEventsTest, AsyncEnginePublishesAndSnapshotsOnItsThread) {
  auto queue = std::make_shared<KvEventQueue>();
  AsyncEngineOptions options;
  options.served_model_name = "fake";
  options.kv_event_sink = queue;
  auto async = std::make_unique<AsyncEngine>(MakeEngine(64), options);
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::mt19937 rng(9);
  for (int i = 0; i < 6; ++i) {
    GenerateRequest r{"q" + std::to_string(i), ChatPrompt(rng, i % 2, 10 + i), Greedy(3)};
    ASSERT_TRUE(async->Submit(std::move(r), [&](RequestOutput out) {
      if (!out.finished) return;
      std::lock_guard<std::mutex> lock(mu);
      ++finished;
      cv.notify_all();
    }).ok());
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return finished == 6; }));
  }
  Result<KvCacheSnapshot> snap = async->SnapshotCachedBlocks().get();
  ASSERT_TRUE(snap.ok());
  Replay replay;
  replay.Apply(queue->Drain().events);
  replay.ExpectEquals(*snap);
  EXPECT_GT(replay.num_stored, 0);
  async.reset();
}

}  // namespace
}  // namespace tandem
