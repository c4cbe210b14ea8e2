// KV router benchmark (issue 8): routing decisions per second and decision latency (p50/p99) with
// 64 workers and about 1M indexed blocks, and KV events applied per second.
//
//   taskset -c 1 build/bench/router_bench [--reps=5] [--seconds=0.3] [--benchmark_filter=...]
//
// First a summary, one line per prompt configuration (the chat mix below, then prompts of exactly
// 16, 32, 64 and 128 blocks continuing a random conversation): decisions/s (a loop of Route calls,
// no timer inside; also per second of the thread's CPU time, which a loaded machine's time
// slicing does not dilute), p50/p99 decision latency (each of 200k decisions timed on its own with
// steady_clock, ~20 ns of it the clock), and KV events applied/s (BM_ApplyEvents' loop), each
// measured --reps times: best and the range. The machine's load average and the CPUs the process
// may run on are printed with it (pin it to one core with taskset). Google Benchmark's
// functions below run after the summary when a --benchmark_* flag is given.
//
// The index is filled the way multi-turn chat traffic fills it: 64 system prompts of 16-64 blocks
// (256-1024 tokens at 16 tokens a block), each cached on 8 workers; conversations continuing one of
// them with 2-6 turns of 4-32 blocks, each cached on its own worker together with its system prompt
// (one in ten turns also on a second worker, without the history before it),
// until about 1M distinct blocks are indexed. Block hashes are the engine's (block_hash.h), of
// random tokens. A decision routes the next turn of a random conversation: its cached history plus
// 4-16 new blocks (mean prompt ~120 blocks, ~2k tokens); the block hashes are given (the frontend
// hashes a prompt once; BM_RouteTokens shows routing from token ids, hashing included). One thread.
// Events: stored{16 blocks} of a chain on a worker of its own, then removed{the same}, alternately.
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>
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
  // Prompts of exactly 16, 32, 64, 128 blocks: a random conversation's history and 128 new blocks,
  // cut to the length (short ones mostly hit a system prompt on 8 workers; long ones often miss).
  std::vector<std::pair<int, std::vector<std::vector<uint64_t>>>> fixed_queries;
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
      // The worker prefilled the system prompt too: it holds it (a no-op where it already did).
      store(c.worker, 0, c.chain);
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
    for (int len : {16, 32, 64, 128}) {
      std::vector<std::vector<uint64_t>> v;
      for (int q = 0; q < 4096; ++q) {
        std::vector<uint64_t> h = conversations[rng() % conversations.size()].chain;
        if (static_cast<int>(h.size()) < len) h = ExtendChain(std::move(h), len - static_cast<int>(h.size()), rng);
        h.resize(len);
        v.push_back(std::move(h));
      }
      fixed_queries.emplace_back(len, std::move(v));
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

// ---- the summary ----

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Decisions per second over `prompts`, routing for about `seconds` of wall time; *per_cpu_second:
// the same per second of this thread's CPU time (what one core does when it is not shared).
double MeasureDecisions(KvRouter& router, const std::vector<std::span<const uint64_t>>& prompts,
                        double seconds, double* mean_overlap, double* per_cpu_second) {
  const double cpu0 = ThreadCpuSeconds();
  RoutingDecision decision;
  size_t i = 0, n = 0;
  int64_t overlap = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    for (int k = 0; k < 4096; ++k) {
      (void)router.Route(prompts[i++ & 4095], &decision);
      overlap += decision.overlap_blocks;
    }
    n += 4096;
  } while ((elapsed = Seconds(t0)) < seconds);
  *mean_overlap = static_cast<double>(overlap) / static_cast<double>(n);
  *per_cpu_second = static_cast<double>(n) / (ThreadCpuSeconds() - cpu0);
  return static_cast<double>(n) / elapsed;
}

// p50 and p99 of 200k decisions, each timed on its own.
std::pair<double, double> MeasureLatency(KvRouter& router,
                                         const std::vector<std::span<const uint64_t>>& prompts) {
  constexpr size_t kN = 200'000;
  std::vector<double> ns(kN);
  RoutingDecision decision;
  for (size_t i = 0; i < kN; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)router.Route(prompts[i & 4095], &decision);
    ns[i] = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  }
  std::sort(ns.begin(), ns.end());
  return {ns[kN / 2], ns[kN * 99 / 100]};
}

// Events applied per second: stored{16} and removed{the same} alternately on a worker of its own;
// *per_cpu_second as in MeasureDecisions.
double MeasureEvents(KvRouter& router, double seconds, double* per_cpu_second) {
  const double cpu0 = ThreadCpuSeconds();
  std::mt19937_64 rng(99);
  constexpr int kChains = 1024;
  std::vector<KvEvent> stored(kChains), removed(kChains);
  for (int c = 0; c < kChains; ++c) {
    const std::vector<uint64_t> chain = ExtendChain({}, 16, rng);
    stored[c].data = KvStoredEvent{0, chain};
    removed[c].data = KvRemovedEvent{chain};
  }
  const std::string worker = "events-worker";
  router.RemoveWorker(worker);
  (void)router.AddWorker(worker);
  uint64_t next_id = 1;
  size_t n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    for (int k = 0; k < 2 * kChains; ++k) {
      KvEvent& e = (k % 2 == 0) ? stored[k / 2] : removed[k / 2];
      e.event_id = next_id++;
      (void)router.ApplyEvents(worker, std::span<const KvEvent>(&e, 1));
    }
    n += 2 * kChains;
  } while ((elapsed = Seconds(t0)) < seconds);
  *per_cpu_second = static_cast<double>(n) / (ThreadCpuSeconds() - cpu0);
  router.RemoveWorker(worker);
  return static_cast<double>(n) / elapsed;
}

std::string LoadAverage() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::string AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return "?";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out += (out.empty() ? "" : ",") + std::to_string(c);
  }
  return out;
}

void Summary(int reps, double seconds) {
  World& world = GetWorld();
  KvRouter& router = *world.router;
  struct Config {
    std::string name;
    std::vector<std::span<const uint64_t>> prompts;
  };
  std::vector<Config> configs;
  {
    Config chat{"chat-mix", {}};
    size_t total = 0;
    for (const Query& q : world.queries) {
      chat.prompts.emplace_back(q.hashes);
      total += q.hashes.size();
    }
    char name[64];
    std::snprintf(name, sizeof(name), "chat-mix(mean %.0f)", static_cast<double>(total) / 4096);
    chat.name = name;
    configs.push_back(std::move(chat));
  }
  for (const auto& [len, prompts] : world.fixed_queries) {
    Config c{std::to_string(len), {}};
    for (const auto& p : prompts) c.prompts.emplace_back(p);
    configs.push_back(std::move(c));
  }
  std::printf("router_bench summary: cpus=%s loadavg(start)=%s reps=%d\n", AllowedCpus().c_str(),
              LoadAverage().c_str(), reps);
  std::vector<double> events, cpu_events;
  for (int r = 0; r < reps; ++r) {
    double per_cpu = 0;
    events.push_back(MeasureEvents(router, seconds, &per_cpu));
    cpu_events.push_back(per_cpu);
  }
  std::sort(events.begin(), events.end());
  std::sort(cpu_events.begin(), cpu_events.end());
  for (const Config& c : configs) {
    std::vector<double> rate, cpu_rate, p50, p99;
    double overlap = 0, per_cpu = 0;
    for (int r = 0; r < reps; ++r) {
      rate.push_back(MeasureDecisions(router, c.prompts, seconds, &overlap, &per_cpu));
      cpu_rate.push_back(per_cpu);
      const auto [a, b] = MeasureLatency(router, c.prompts);
      p50.push_back(a);
      p99.push_back(b);
    }
    std::sort(rate.begin(), rate.end());
    std::sort(cpu_rate.begin(), cpu_rate.end());
    std::sort(p50.begin(), p50.end());
    std::sort(p99.begin(), p99.end());
    std::printf("ROUTER workers=%d indexed_blocks=%zu prompt_blocks=%-18s mean_overlap=%5.1f "
                "decisions/s=%.0f [%.0f..%.0f] per_cpu_s=%.0f [%.0f..%.0f] p50_ns=%.0f [..%.0f] p99_ns=%.0f [..%.0f] "
                "events/s=%.0f [%.0f..%.0f] per_cpu_s=%.0f [%.0f..%.0f] (16 blocks/event)\n",
                router.num_workers(), router.num_indexed_blocks(), c.name.c_str(), overlap,
                rate.back(), rate.front(), rate.back(), cpu_rate.back(), cpu_rate.front(),
                cpu_rate.back(), p50.front(), p50.back(), p99.front(),
                p99.back(), events.back(), events.front(), events.back(), cpu_events.back(),
                cpu_events.front(), cpu_events.back());
    std::fflush(stdout);
  }
  std::printf("router_bench summary: loadavg(end)=%s; [a..b] = range over reps; decisions/s and "
              "events/s: best of reps; p50/p99: best of reps\n", LoadAverage().c_str());
}

}  // namespace
}  // namespace tandem::router

int main(int argc, char** argv) {
  int reps = 5;
  double seconds = 0.3;
  bool gbench = false;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--reps=", 7) == 0) {
      reps = std::max(1, std::atoi(argv[i] + 7));
    } else if (std::strncmp(argv[i], "--seconds=", 10) == 0) {
      seconds = std::atof(argv[i] + 10);
    } else {
      gbench |= std::strncmp(argv[i], "--benchmark", 11) == 0;
      rest.push_back(argv[i]);
    }
  }
  tandem::router::Summary(reps, seconds);
  if (!gbench) return 0;
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
