// KvIndex and KvRouter's event handling against a brute-force reference (a set of hashes per
// worker; overlap = the leading prompt hashes in the set) on random event streams with removes,
// clears, worker removal and lost events (gaps, resynced from snapshots).
#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/block_hash.h"
#include "router/kv_index.h"
#include "router/kv_router.h"

namespace tandem::router {
namespace {

int BruteOverlap(const std::set<uint64_t>& cached, const std::vector<uint64_t>& hashes) {
  int n = 0;
  while (n < static_cast<int>(hashes.size()) && cached.count(hashes[n])) ++n;
  return n;
}

// Chains of block hashes sharing prefixes: a few "system prompts", conversations extending them.
std::vector<std::vector<uint64_t>> MakeChains(std::mt19937_64& rng, int num_chains, int block_size) {
  std::vector<std::vector<int32_t>> prompts;
  for (int s = 0; s < 4; ++s) {
    std::vector<int32_t> p(block_size * (2 + s));
    for (auto& t : p) t = static_cast<int32_t>(rng() % 1000);
    prompts.push_back(p);
  }
  std::vector<std::vector<uint64_t>> chains;
  for (int c = 0; c < num_chains; ++c) {
    std::vector<int32_t> p = prompts[rng() % prompts.size()];
    if (c % 3 == 0 && !chains.empty()) p.resize(block_size);  // diverge after one block
    const int extra = static_cast<int>(rng() % 6) * block_size;
    for (int i = 0; i < extra; ++i) p.push_back(static_cast<int32_t>(rng() % 1000));
    chains.push_back(ComputeBlockHashes(p, block_size));
  }
  return chains;
}

TEST(KvIndexTest, MatchesBruteForceUnderRandomStoresAndRemoves) {
  std::mt19937_64 rng(7);
  constexpr int kWorkers = 130;  // three words of bitset
  KvIndex index(2, /*expected_blocks=*/1);  // grows in workers and slots as it goes
  std::vector<std::set<uint64_t>> ref(kWorkers);
  // Small hash values collide in home slots: probing and backward-shift deletion get exercised.
  std::vector<uint64_t> universe;
  for (int i = 0; i < 400; ++i) universe.push_back(i < 200 ? static_cast<uint64_t>(i) : rng());
  for (int step = 0; step < 40000; ++step) {
    const int w = static_cast<int>(rng() % kWorkers);
    const uint64_t h = universe[rng() % universe.size()];
    const int op = static_cast<int>(rng() % 100);
    if (op < 55) {
      index.Store(w, h);
      ref[w].insert(h);
    } else if (op < 99) {
      index.Remove(w, h);
      ref[w].erase(h);
    } else {
      index.RemoveWorker(w);
      ref[w].clear();
    }
    if (step % 1000 == 0) {
      std::set<uint64_t> all;
      for (int v = 0; v < kWorkers; ++v) {
        ASSERT_EQ(index.num_blocks(v), ref[v].size()) << "worker " << v << " step " << step;
        all.insert(ref[v].begin(), ref[v].end());
      }
      ASSERT_EQ(index.num_blocks(), all.size());
      for (uint64_t u : universe) {
        for (int v = 0; v < kWorkers; v += 7) ASSERT_EQ(index.Contains(v, u), ref[v].count(u) > 0);
      }
      // Queries: runs of the universe, so that prefixes of several lengths match.
      std::vector<int> overlap(kWorkers);
      for (int q = 0; q < 20; ++q) {
        std::vector<uint64_t> hashes;
        const size_t start = rng() % universe.size();
        for (size_t i = 0; i < 12; ++i) hashes.push_back(universe[(start + i) % universe.size()]);
        index.FindMatches(hashes, overlap);
        for (int v = 0; v < kWorkers; ++v) {
          ASSERT_EQ(overlap[v], BruteOverlap(ref[v], hashes)) << "worker " << v;
        }
      }
    }
  }
  EXPECT_GT(index.max_workers(), 128);
}

TEST(KvIndexTest, OverlapIsTheLongestCachedPrefix) {
  KvIndex index(4);
  const std::vector<uint64_t> chain = {11, 12, 13, 14, 15};
  for (int i = 0; i < 5; ++i) index.Store(0, chain[i]);
  for (int i = 0; i < 2; ++i) index.Store(1, chain[i]);
  index.Store(2, chain[1]);  // no first block: nothing reachable
  for (int i = 0; i < 5; ++i) index.Store(3, chain[i]);
  index.Remove(3, chain[2]);  // a hole: the prefix ends there
  std::vector<int> overlap(4);
  index.FindMatches(chain, overlap);
  EXPECT_EQ(overlap, (std::vector<int>{5, 2, 0, 2}));
  index.FindMatches({}, overlap);
  EXPECT_EQ(overlap, (std::vector<int>{0, 0, 0, 0}));
  index.RemoveWorker(0);
  index.FindMatches(chain, overlap);
  EXPECT_EQ(overlap, (std::vector<int>{0, 2, 0, 2}));
  EXPECT_EQ(index.num_blocks(0), 0u);
  EXPECT_EQ(index.num_blocks(), 4u);  // 11, 12 (1, 2, 3), 14, 15 (3)
}

// At most 64 workers: FindMatches' one-word walk, with prompts longer than its prefetch distance,
// overlap spans narrower than the bitset, and a table of 2 MiB pages (huge_page_allocator.h).
TEST(KvIndexTest, OneWordWalkMatchesBruteForceOnLongChains) {
  std::mt19937_64 rng(11);
  constexpr int kWorkers = 64;
  KvIndex index(kWorkers, /*expected_blocks=*/150000);  // 2^18 slots of 16 bytes: 4 MiB
  ASSERT_GE(index.memory_bytes(), size_t{4} << 20);
  std::vector<std::set<uint64_t>> ref(kWorkers);
  // 40 chains of 100 blocks; small values collide in home slots, as in the test above.
  std::vector<std::vector<uint64_t>> chains(40);
  for (size_t c = 0; c < chains.size(); ++c) {
    for (int i = 0; i < 100; ++i) chains[c].push_back(c < 10 ? c * 100 + i + 1 : rng());
  }
  for (int step = 0; step < 10000; ++step) {
    const int w = static_cast<int>(rng() % kWorkers);
    const auto& chain = chains[rng() % chains.size()];
    const int len = static_cast<int>(rng() % chain.size());
    const int op = static_cast<int>(rng() % 1000);
    if (op < 600) {
      for (int i = 0; i < len; ++i) {
        index.Store(w, chain[i]);
        ref[w].insert(chain[i]);
      }
    } else if (op < 998) {
      const uint64_t h = chain[rng() % chain.size()];
      index.Remove(w, h);
      ref[w].erase(h);
    } else {
      index.RemoveWorker(w);
      ref[w].clear();
    }
    if (step % 500 == 0) {
      for (size_t width : {size_t{64}, size_t{63}, size_t{5}}) {
        std::vector<int> overlap(width);
        for (const auto& q : chains) {
          index.FindMatches(q, overlap);
          for (size_t v = 0; v < width; ++v) {
            ASSERT_EQ(overlap[v], BruteOverlap(ref[v], q)) << "worker " << v << " step " << step;
          }
        }
      }
    }
  }
}

// Nodes lie in the order they were first stored; the walk tries the next node before the table.
// Holes, re-stored blocks (a new node at the end) and compaction must not change any overlap.
TEST(KvIndexTest, NodeOrderHolesAndCompaction) {
  KvIndex index(64);
  std::vector<uint64_t> x;
  for (uint64_t i = 0; i < 3000; ++i) x.push_back(1000000 + i);
  for (uint64_t h : x) index.Store(0, h);
  std::vector<int> overlap(3);
  // Re-stored after removal: y1's node moves to the end, after y2's.
  const std::vector<uint64_t> y = {7, 8, 9};
  for (uint64_t h : y) index.Store(1, h);
  index.Remove(1, y[1]);
  index.FindMatches(y, overlap);
  EXPECT_EQ(overlap, (std::vector<int>{0, 1, 0}));
  index.Store(1, y[1]);
  index.Store(2, y[0]);
  index.FindMatches(y, overlap);
  EXPECT_EQ(overlap, (std::vector<int>{0, 3, 1}));
  const size_t before = index.memory_bytes();
  // 2500 holes in x (more than the live nodes left): compacted, in order.
  for (size_t i = 100; i < 2600; ++i) index.Remove(0, x[i]);
  EXPECT_LT(index.memory_bytes(), before);
  EXPECT_EQ(index.num_blocks(), 500u + 3u);
  EXPECT_EQ(index.num_blocks(0), 500u);
  index.FindMatches(x, overlap);
  EXPECT_EQ(overlap, (std::vector<int>{100, 0, 0}));
  index.FindMatches(std::span(x).subspan(2600), overlap);
  EXPECT_EQ(overlap, (std::vector<int>{400, 0, 0}));
  index.FindMatches(y, overlap);
  EXPECT_EQ(overlap, (std::vector<int>{0, 3, 1}));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(index.Contains(0, x[i]), i < 100 || i >= 2600);
  // Stored again: new nodes after the compacted ones; the whole chain matches again.
  for (size_t i = 100; i < 2600; ++i) index.Store(0, x[i]);
  index.FindMatches(x, overlap);
  EXPECT_EQ(overlap, (std::vector<int>{3000, 0, 0}));
}

// The truth (what each engine holds) gets every event; the router gets them through a lossy
// channel and resyncs from snapshots of the truth when it reports a gap.
TEST(KvRouterEventsTest, RandomStreamsWithGapsMatchBruteForce) {
  std::mt19937_64 rng(42);
  const std::vector<std::vector<uint64_t>> chains = MakeChains(rng, 60, 4);
  KvRouterConfig config;
  config.seed = 1;
  config.expected_blocks = 4;
  KvRouter router(config);
  constexpr int kWorkers = 6;
  struct Truth {
    std::set<uint64_t> cached;
    uint64_t last_event_id = 0;
    std::optional<KvCacheSnapshot> late_snapshot;  // delivered a few events after the gap
    int late_countdown = 0;
  };
  std::map<std::string, Truth> truth;
  auto name = [](int w) { return "worker-" + std::to_string(w); };
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_TRUE(router.AddWorker(name(w)).ok());
    truth[name(w)];
  }
  auto snapshot_of = [](const Truth& t) {
    KvCacheSnapshot s;
    s.last_event_id = t.last_event_id;
    for (uint64_t h : t.cached) s.blocks.push_back({h, 0});
    return s;
  };
  int num_gaps = 0, num_resyncs_with_replay = 0, num_compared = 0;
  for (int step = 0; step < 6000; ++step) {
    const std::string w = name(static_cast<int>(rng() % kWorkers));
    Truth& t = truth[w];
    const int op = static_cast<int>(rng() % 100);
    if (op == 0) {  // the worker leaves and a new one takes its id
      router.RemoveWorker(w);
      ASSERT_FALSE(router.HasWorker(w));
      ASSERT_TRUE(router.AddWorker(w).ok());
      t = Truth{};
      continue;
    }
    KvEvent e;
    e.event_id = ++t.last_event_id;
    if (op < 60) {
      const auto& chain = chains[rng() % chains.size()];
      const size_t a = rng() % chain.size(), b = a + 1 + rng() % (chain.size() - a);
      KvStoredEvent s{a == 0 ? 0 : chain[a - 1], {chain.begin() + a, chain.begin() + b}};
      for (uint64_t h : s.block_hashes) t.cached.insert(h);
      e.data = s;
    } else if (op < 97) {
      KvRemovedEvent r;
      for (int k = 0; k < 3; ++k) {
        const auto& chain = chains[rng() % chains.size()];
        r.block_hashes.push_back(chain[rng() % chain.size()]);
      }
      for (uint64_t h : r.block_hashes) t.cached.erase(h);
      e.data = r;
    } else {
      t.cached.clear();
      e.data = KvClearedEvent{};
    }
    const bool lost = rng() % 50 == 0;
    if (!lost) {
      auto applied = router.ApplyEvents(w, std::span<const KvEvent>(&e, 1));
      ASSERT_TRUE(applied.ok());
      if (rng() % 10 == 0) {  // a duplicate delivery is stale
        auto again = router.ApplyEvents(w, std::span<const KvEvent>(&e, 1));
        ASSERT_TRUE(again.ok());
        if (!again->needs_snapshot) {
          ASSERT_EQ(again->num_stale, 1);
        }
      }
      if (applied->needs_snapshot && !t.late_snapshot) {
        ++num_gaps;
        t.late_snapshot = snapshot_of(t);
        t.late_countdown = static_cast<int>(rng() % 4);
      }
    }
    for (auto& [id, tr] : truth) {
      if (tr.late_snapshot && tr.late_countdown-- <= 0) {
        auto r = router.ApplySnapshot(id, *tr.late_snapshot);
        ASSERT_TRUE(r.ok());
        if (r->num_applied > 0) ++num_resyncs_with_replay;
        tr.late_snapshot.reset();
        if (r->needs_snapshot) {  // a loss after the snapshot: resync again right away
          tr.late_snapshot = snapshot_of(tr);
          tr.late_countdown = 0;
        }
      }
    }
    // Compare the workers the router is in sync with (a lost last event is not detectable until
    // the next one arrives: such a worker waits).
    if (step % 10 != 0) continue;
    std::vector<const RouterWorkerState*> synced;
    const std::vector<RouterWorkerState> states = router.Workers();
    for (const RouterWorkerState& s : states) {
      if (!s.needs_snapshot && s.next_event_id == truth[s.worker_id].last_event_id + 1) {
        synced.push_back(&s);
      }
    }
    for (const RouterWorkerState* s : synced) {
      ASSERT_EQ(s->num_cached_blocks, truth[s->worker_id].cached.size()) << s->worker_id;
      ++num_compared;
    }
    for (int q = 0; q < 10; ++q) {
      const auto& chain = chains[rng() % chains.size()];
      const auto overlaps = router.Overlaps(chain);
      for (const RouterWorkerState* s : synced) {
        for (const auto& [id, overlap] : overlaps) {
          if (id != s->worker_id) continue;
          ASSERT_EQ(overlap, BruteOverlap(truth[id].cached, chain)) << id << " step " << step;
        }
      }
    }
  }
  EXPECT_GT(num_compared, 1000);
  EXPECT_GT(num_gaps, 10);  // the channel did lose events
  EXPECT_GT(num_resyncs_with_replay, 0);  // and buffered events were replayed after snapshots
}

TEST(KvRouterEventsTest, GapBuffersUntilSnapshotThenReplays) {
  KvRouter router(KvRouterConfig{});
  ASSERT_TRUE(router.AddWorker("w").ok());
  const std::vector<uint64_t> chain = {1, 2, 3, 4};
  std::vector<KvEvent> events = {
      {1, KvStoredEvent{0, {1, 2}}},
      {3, KvStoredEvent{2, {3}}},  // event 2 is lost
      {4, KvStoredEvent{3, {4}}},
  };
  auto r = router.ApplyEvents("w", events);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->num_applied, 1);
  EXPECT_EQ(r->num_buffered, 2);
  EXPECT_TRUE(r->needs_snapshot);
  EXPECT_EQ(router.Overlaps(chain)[0].second, 2);  // stale but usable until the snapshot
  // Event 2 had removed block 2; the snapshot (as of event 2) says so.
  KvCacheSnapshot snapshot;
  snapshot.last_event_id = 2;
  snapshot.blocks = {{1, 0}};
  snapshot.load.num_active_blocks = 7;
  auto s = router.ApplySnapshot("w", snapshot);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->needs_snapshot);
  EXPECT_EQ(s->num_applied, 2);  // events 3 and 4 replayed
  EXPECT_EQ(router.Overlaps(chain)[0].second, 1);
  EXPECT_EQ(router.Workers()[0].num_cached_blocks, 3u);  // 1, 3, 4
  EXPECT_EQ(router.Workers()[0].next_event_id, 5u);
  EXPECT_EQ(router.Workers()[0].load.num_active_blocks, 7);
  EXPECT_EQ(router.ApplyEvents("nobody", events).status().code(), StatusCode::kNotFound);
}

// A joining worker's snapshot fetched before its first request and applied after that request's
// events (kv_routing.cc's resync thread vs the feed thread): it must not rewind the worker.
// Without the stale check the blocks go and next_event_id is back at 1, with no gap to heal it.
TEST(KvRouterEventsTest, ASnapshotOlderThanTheAppliedEventsIsIgnored) {
  KvRouter router(KvRouterConfig{});
  ASSERT_TRUE(router.AddWorker("w").ok());
  KvCacheSnapshot before;  // last_event_id 0, no blocks
  const std::vector<uint64_t> chain = {1, 2, 3};
  const KvEvent stored{1, KvStoredEvent{0, chain}};
  ASSERT_EQ(router.ApplyEvents("w", std::span<const KvEvent>(&stored, 1))->num_applied, 1);
  auto s = router.ApplySnapshot("w", before);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->stale_snapshot);
  EXPECT_EQ(router.Overlaps(chain)[0].second, 3);
  EXPECT_EQ(router.Workers()[0].next_event_id, 2u);
  // A snapshot as new as the events (or newer) still applies.
  KvCacheSnapshot now;
  now.last_event_id = 1;
  now.blocks = {{1, 0}, {2, 1}, {3, 2}};
  EXPECT_FALSE(router.ApplySnapshot("w", now)->stale_snapshot);
  EXPECT_EQ(router.Overlaps(chain)[0].second, 3);
}

}  // namespace
}  // namespace tandem::router
