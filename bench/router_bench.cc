// KV router benchmark (issue 8): routing decisions per second and decision latency (p50/p99) with
// 64 workers and about 1M indexed blocks, and KV events applied per second.
//
//   build/bench/router_bench            [--benchmark_filter=...]
//
// The index is filled the way multi-turn chat traffic fills it: 64 system prompts of 16-64 blocks
// (256-1024 tokens at 16 tokens a block), each cached on 8 workers; conversations continuing one of
// them with 2-6 turns of 4-32 blocks, each cached on its own worker (one in ten also on a second),
// until about 1M distinct blocks are indexed. Block hashes are the engine's (block_hash.h), of
// random tokens. A decision routes the next turn of a random conversation: its cached history plus
// 4-16 new blocks (mean prompt ~120 blocks, ~2k tokens); the block hashes are given (the frontend
// hashes a prompt once; BM_RouteTokens shows routing from token ids, hashing included). One thread.
// Events: stored{16 blocks} of a chain on a worker of its own, then removed{the same}, alternately.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "engine/block_hash.h"
#include "engine/kv_events.h"
#include "router/kv_router.h"

namespace tandem::router {
namespace {

constexpr int kNumWorkers = 64;
constexpr size_t kTargetBlocks = 1'000'000;
constexpr int kBlockSize = 16;

std::string WorkerId(int w) { return "decode-" + std::to_string(w); }

std::vector<uint64_t> ExtendChain(std::vector<uint64_t> chain, int num_blocks, std::mt19937_64& rng) {
  std::vector<int32_t> tokens(kBlockSize);
  for (int b = 0; b < num_blocks; ++b) {
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % 151000);
    chain.push_back(HashBlock(chain.empty() ? 0 : chain.back(), tokens));
  }
  return chain;
}

struct Query {
  std::vector<uint64_t> hashes;
  std::vector<int32_t> tokens;  // for BM_RouteTokens: hashes are recomputed from these
};

struct World {
  std::unique_ptr<KvRouter> router;
  std::vector<Query> queries;
  size_t num_events = 0;
  double fill_seconds = 0;

  World() {
    KvRouterConfig config;
    config.mode = RouterMode::kKv;
    config.seed = 1;
    config.expected_workers = kNumWorkers;
    config.expected_blocks = kTargetBlocks + kTargetBlocks / 4;
    router = std::make_unique<KvRouter>(config);
    for (int w = 0; w < kNumWorkers; ++w) (void)router->AddWorker(WorkerId(w));
    std::mt19937_64 rng(7);
    std::vector<uint64_t> next_id(kNumWorkers, 1);
    auto store = [&](int w, uint64_t parent, std::span<const uint64_t> blocks) {
      KvEvent e{next_id[w]++, KvStoredEvent{parent, {blocks.begin(), blocks.end()}}};
      (void)router->ApplyEvents(WorkerId(w), std::span<const KvEvent>(&e, 1));
      ++num_events;
    };
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::vector<uint64_t>> systems;
    for (int s = 0; s < 64; ++s) {
      systems.push_back(ExtendChain({}, 16 + static_cast<int>(rng() % 49), rng));
      for (int k = 0; k < 8; ++k) store((s * 8 + k * 7) % kNumWorkers, 0, systems.back());
    }
    struct Conversation {
      std::vector<uint64_t> chain;
      int worker;
    };
    std::vector<Conversation> conversations;
    while (router->num_indexed_blocks() < kTargetBlocks) {
      Conversation c{systems[rng() % systems.size()], static_cast<int>(rng() % kNumWorkers)};
      const int turns = 2 + static_cast<int>(rng() % 5);
      for (int t = 0; t < turns; ++t) {
        const size_t before = c.chain.size();
        c.chain = ExtendChain(std::move(c.chain), 4 + static_cast<int>(rng() % 29), rng);
        const std::span<const uint64_t> turn = std::span(c.chain).subspan(before);
        store(c.worker, c.chain[before - 1], turn);
        if (conversations.size() % 10 == 0) store((c.worker + 1) % kNumWorkers, c.chain[before - 1], turn);
      }
      conversations.push_back(std::move(c));
    }
    fill_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (int q = 0; q < 4096; ++q) {
      const Conversation& c = conversations[rng() % conversations.size()];
      Query query;
      query.hashes = ExtendChain(c.chain, 4 + static_cast<int>(rng() % 13), rng);
      // Tokens of the same length (their hashes differ from query.hashes: only the cost matters).
      query.tokens.resize(query.hashes.size() * kBlockSize);
      for (auto& t : query.tokens) t = static_cast<int32_t>(rng() % 151000);
      queries.push_back(std::move(query));
    }
    size_t total = 0;
    for (const Query& q : queries) total += q.hashes.size();
    std::printf("router_bench: %d workers, %zu indexed blocks (%zu stored events, filled in %.2f s, "
                "%.0f blocks/s), %zu conversations, mean prompt %.1f blocks\n",
                kNumWorkers, router->num_indexed_blocks(), num_events, fill_seconds,
                static_cast<double>(router->num_indexed_blocks()) / fill_seconds,
                conversations.size(), static_cast<double>(total) / queries.size());
  }
};

World& GetWorld() {
  static World world;
  return world;
}

void BM_Route(benchmark::State& state) {
  World& world = GetWorld();
  RoutingDecision decision;
  size_t i = 0;
  int64_t overlap = 0;
  for (auto _ : state) {
    const Query& q = world.queries[i++ & 4095];
    if (!world.router->Route(q.hashes, &decision).ok()) state.SkipWithError("route failed");
    overlap += decision.overlap_blocks;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["mean_overlap_blocks"] =
      static_cast<double>(overlap) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_Route);

// Per-decision latency: each decision timed on its own (steady_clock, ~20 ns of overhead included).
void BM_RouteLatency(benchmark::State& state) {
  World& world = GetWorld();
  RoutingDecision decision;
  std::vector<double> ns;
  ns.reserve(1 << 20);
  size_t i = 0;
  for (auto _ : state) {
    const Query& q = world.queries[i++ & 4095];
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(world.router->Route(q.hashes, &decision));
    const auto t1 = std::chrono::steady_clock::now();
    if (ns.size() < ns.capacity()) ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  std::sort(ns.begin(), ns.end());
  auto pct = [&](double p) { return ns.empty() ? 0.0 : ns[static_cast<size_t>(p * (ns.size() - 1))]; };
  state.counters["p50_ns"] = pct(0.50);
  state.counters["p99_ns"] = pct(0.99);
  state.counters["p999_ns"] = pct(0.999);
  state.counters["max_ns"] = ns.empty() ? 0.0 : ns.back();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RouteLatency)->Iterations(1 << 20);

// With the predicted-load bookkeeping of a request id (Route + MarkPrefillDone + Free).
void BM_RouteWithRequestTracking(benchmark::State& state) {
  World& world = GetWorld();
  RoutingDecision decision;
  size_t i = 0;
  const std::vector<std::string> ids = [] {
    std::vector<std::string> v;
    for (int k = 0; k < 4096; ++k) v.push_back("chatcmpl-" + std::to_string(1000000 + k));
    return v;
  }();
  for (auto _ : state) {
    const size_t k = i++ & 4095;
    if (!world.router->Route(world.queries[k].hashes, &decision, ids[k]).ok()) {
      state.SkipWithError("route failed");
    }
    world.router->MarkPrefillDone(ids[k]);
    world.router->Free(ids[k]);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RouteWithRequestTracking);

// From token ids: the prompt's block hashes computed here first (XXH3 over 16 tokens a block).
void BM_RouteTokens(benchmark::State& state) {
  World& world = GetWorld();
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(world.router->RouteTokens(world.queries[i++ & 4095].tokens));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RouteTokens);

// Events applied: stored{16 blocks} of a fresh chain on a worker, then removed{them}: the index
// stays at its size. Items = events; blocks_per_second counts the hashes they carry.
void BM_ApplyEvents(benchmark::State& state) {
  World& world = GetWorld();
  std::mt19937_64 rng(99);
  constexpr int kChains = 1024;
  std::vector<std::vector<uint64_t>> chains;
  for (int c = 0; c < kChains; ++c) chains.push_back(ExtendChain({}, 16, rng));
  // A worker of its own so that event ids are its alone.
  const std::string worker = "events-worker";
  world.router->RemoveWorker(worker);
  (void)world.router->AddWorker(worker);
  uint64_t next_id = 1;
  std::vector<KvEvent> stored(kChains), removed(kChains);
  for (int c = 0; c < kChains; ++c) {
    stored[c].data = KvStoredEvent{0, chains[c]};
    removed[c].data = KvRemovedEvent{chains[c]};
  }
  size_t i = 0;
  int64_t blocks = 0;
  for (auto _ : state) {
    const size_t c = (i / 2) % kChains;
    KvEvent& e = (i % 2 == 0) ? stored[c] : removed[c];
    ++i;
    e.event_id = next_id++;
    auto r = world.router->ApplyEvents(worker, std::span<const KvEvent>(&e, 1));
    if (!r.ok() || r->num_applied != 1) state.SkipWithError("event not applied");
    blocks += 16;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["blocks_per_second"] =
      benchmark::Counter(static_cast<double>(blocks), benchmark::Counter::kIsRate);
  world.router->RemoveWorker(worker);
}
BENCHMARK(BM_ApplyEvents);

}  // namespace
}  // namespace tandem::router

BENCHMARK_MAIN();
