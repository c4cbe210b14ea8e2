// KvRouter: cost, modes, temperature, ties, predicted load, worker changes, errors; KV event JSON.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/block_hash.h"
#include "engine/kv_events.h"
#include "router/kv_router.h"

namespace tandem::router {
namespace {

std::vector<uint64_t> Chain(int n, uint64_t salt = 0) {
  std::vector<uint64_t> c;
  for (int i = 0; i < n; ++i) c.push_back(salt * 1000 + static_cast<uint64_t>(i) + 1);
  return c;
}

void Store(KvRouter& router, const std::string& worker, std::span<const uint64_t> hashes,
           uint64_t event_id) {
  KvEvent e{event_id, KvStoredEvent{0, {hashes.begin(), hashes.end()}}};
  auto r = router.ApplyEvents(worker, std::span<const KvEvent>(&e, 1));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->num_applied, 1);
}

std::unique_ptr<KvRouter> Make(RouterMode mode, double temperature = 0.0,
                               std::vector<std::string> workers = {"a", "b", "c"}) {
  KvRouterConfig config;
  config.mode = mode;
  config.temperature = temperature;
  config.seed = 12345;
  auto router = KvRouter::Create(config);
  EXPECT_TRUE(router.ok());
  for (const auto& w : workers) EXPECT_TRUE((*router)->AddWorker(w).ok());
  return std::move(router).value();
}

std::map<std::string, int> Count(KvRouter& router, std::span<const uint64_t> hashes, int n) {
  std::map<std::string, int> counts;
  RoutingDecision d;
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(router.Route(hashes, &d).ok());
    ++counts[d.worker_id];
  }
  return counts;
}

TEST(KvRouterTest, RoundRobinCyclesInWorkerIdOrder) {
  auto router = Make(RouterMode::kRoundRobin, 0.0, {"c", "a", "b"});
  std::string order;
  for (int i = 0; i < 6; ++i) order += router->Route(Chain(3)).value().worker_id;
  EXPECT_EQ(order, "abcabc");
}

TEST(KvRouterTest, RandomIsUniform) {
  auto router = Make(RouterMode::kRandom);
  for (const auto& [id, n] : Count(*router, Chain(2), 30000)) {
    EXPECT_NEAR(n / 30000.0, 1.0 / 3, 0.02) << id;
  }
}

TEST(KvRouterTest, KvTakesTheLeastCost) {
  auto router = Make(RouterMode::kKv);
  const std::vector<uint64_t> prompt = Chain(8);
  Store(*router, "a", std::span(prompt).first(4), 1);
  Store(*router, "c", std::span(prompt).first(2), 1);
  RoutingDecision d = router->Route(prompt).value();
  EXPECT_EQ(d.worker_id, "a");  // costs 4, 8, 6
  EXPECT_EQ(d.overlap_blocks, 4);
  EXPECT_EQ(d.num_prompt_blocks, 8);
  EXPECT_EQ(d.cost, 4.0);
  // a is busy: a 4 + 10, b 8 + 0, c 6 + 0.
  ASSERT_TRUE(router->UpdateLoad("a", KvLoad{10, 100, 0, 1}).ok());
  d = router->Route(prompt).value();
  EXPECT_EQ(d.worker_id, "c");
  EXPECT_EQ(d.prefill_blocks, 6);
  EXPECT_EQ(d.decode_blocks, 0);
  // overlap_weight 0: only the load counts; a's cache no longer helps it (b and c tie at 0).
  KvRouterConfig config;
  config.overlap_weight = 0.0;
  config.seed = 3;
  KvRouter load_only(config);
  for (const char* w : {"a", "b", "c"}) ASSERT_TRUE(load_only.AddWorker(w).ok());
  Store(load_only, "a", prompt, 1);
  ASSERT_TRUE(load_only.UpdateLoad("a", KvLoad{1, 100, 0, 1}).ok());
  for (int i = 0; i < 20; ++i) {
    d = load_only.Route(prompt).value();
    EXPECT_NE(d.worker_id, "a");
    EXPECT_EQ(d.cost, 0.0);
  }
}

TEST(KvRouterTest, TemperatureZeroTiesGoToTheLeastLoadedThenRandom) {
  auto router = Make(RouterMode::kKv);
  const std::vector<uint64_t> prompt = Chain(8);
  // b: overlap 4, 4 active blocks: cost 8 like a and c (overlap 0, idle), but more loaded.
  Store(*router, "b", std::span(prompt).first(4), 1);
  ASSERT_TRUE(router->UpdateLoad("b", KvLoad{4, 100, 0, 1}).ok());
  auto counts = Count(*router, prompt, 4000);
  EXPECT_EQ(counts["b"], 0);
  EXPECT_NEAR(counts["a"] / 4000.0, 0.5, 0.04);
  EXPECT_NEAR(counts["c"] / 4000.0, 0.5, 0.04);
}

// Many tied workers (the common case: most workers hold none of the prompt): uniform among them.
TEST(KvRouterTest, TemperatureZeroManyTiesAreUniform) {
  std::vector<std::string> ids;
  for (int i = 0; i < 64; ++i) ids.push_back("w" + std::to_string(100 + i));
  auto router = Make(RouterMode::kKv, 0.0, ids);
  const std::vector<uint64_t> prompt = Chain(8);
  // Every fourth worker busy (cost 8 + 3); the other 48 tie at cost 8, decode 0.
  for (int i = 0; i < 64; i += 4) ASSERT_TRUE(router->UpdateLoad(ids[i], KvLoad{3, 100, 0, 1}).ok());
  constexpr int kN = 48000;
  auto counts = Count(*router, prompt, kN);
  for (int i = 0; i < 64; ++i) {
    if (i % 4 == 0) {
      EXPECT_EQ(counts[ids[i]], 0) << ids[i];
    } else {
      EXPECT_NEAR(counts[ids[i]], kN / 48, 5 * std::sqrt(kN / 48.0)) << ids[i];
    }
  }
  // A worker with the prompt cached breaks the tie: always it.
  Store(*router, ids[63], prompt, 1);
  EXPECT_EQ(Count(*router, prompt, 100)[ids[63]], 100);
}

TEST(KvRouterTest, TemperatureSamplesBySoftmaxOfNormalizedCost) {
  for (double t : {0.5, 1.0, 3.0}) {
    auto router = Make(RouterMode::kKv, t);
    const std::vector<double> load = {0, 10, 20};  // empty prompt: cost = load
    ASSERT_TRUE(router->UpdateLoad("a", KvLoad{0, 100, 0, 0}).ok());
    ASSERT_TRUE(router->UpdateLoad("b", KvLoad{10, 100, 0, 0}).ok());
    ASSERT_TRUE(router->UpdateLoad("c", KvLoad{20, 100, 0, 0}).ok());
    std::vector<double> p;
    double total = 0;
    for (double c : load) {
      p.push_back(std::exp(-(c - 0.0) / ((20.0 - 0.0) * t)));
      total += p.back();
    }
    constexpr int kN = 60000;
    auto counts = Count(*router, {}, kN);
    EXPECT_NEAR(counts["a"] / double(kN), p[0] / total, 0.012) << "T=" << t;
    EXPECT_NEAR(counts["b"] / double(kN), p[1] / total, 0.012) << "T=" << t;
    EXPECT_NEAR(counts["c"] / double(kN), p[2] / total, 0.012) << "T=" << t;
  }
  // Equal costs at T > 0: uniform.
  auto router = Make(RouterMode::kKv, 1.0);
  for (const auto& [id, n] : Count(*router, Chain(4), 30000)) EXPECT_NEAR(n / 30000.0, 1.0 / 3, 0.02);
}

TEST(KvRouterTest, PredictedLoadSpreadsRequestsUntilReportsSupersedeIt) {
  auto router = Make(RouterMode::kKv, 0.0, {"a", "b"});
  const std::vector<uint64_t> prompt = Chain(8);
  const std::string first = router->Route(prompt, "r1").value().worker_id;
  const std::string second = router->Route(prompt, "r2").value().worker_id;
  EXPECT_NE(first, second);  // r1's 8 prefill + 8 decode blocks count on `first`
  auto state = [&](const std::string& id) {
    for (const auto& s : router->Workers()) {
      if (s.worker_id == id) return s;
    }
    return RouterWorkerState{};
  };
  EXPECT_EQ(state(first).predicted_prefill_blocks, 8);
  EXPECT_EQ(state(first).predicted_decode_blocks, 8);
  router->MarkPrefillDone("r1");
  router->MarkPrefillDone("r1");  // once only
  EXPECT_EQ(state(first).predicted_prefill_blocks, 0);
  EXPECT_EQ(state(first).predicted_decode_blocks, 8);
  ASSERT_TRUE(router->UpdateLoad(first, KvLoad{9, 100, 0, 1}).ok());
  EXPECT_EQ(state(first).predicted_decode_blocks, 0);  // the report includes r1
  router->Free("r1");
  EXPECT_EQ(state(first).predicted_decode_blocks, 0);
  EXPECT_EQ(state(first).predicted_prefill_blocks, 0);
  router->Free("r2");  // never prefilled, no report since: both predictions go
  EXPECT_EQ(state(second).predicted_prefill_blocks, 0);
  EXPECT_EQ(state(second).predicted_decode_blocks, 0);
  EXPECT_EQ(router->Route(prompt, "r3").status().code(), StatusCode::kOk);
  EXPECT_EQ(router->Route(prompt, "r3").status().code(), StatusCode::kInvalidArgument);
}

TEST(KvRouterTest, RemovedWorkersLeaveTheIndexAndGetNoTraffic) {
  auto router = Make(RouterMode::kKv);
  const std::vector<uint64_t> prompt = Chain(8);
  Store(*router, "a", prompt, 1);
  Store(*router, "b", std::span(prompt).first(3), 1);
  EXPECT_EQ(router->num_indexed_blocks(), 8u);
  router->Route(prompt, "in-flight").value();
  router->RemoveWorker("a");
  EXPECT_EQ(router->num_indexed_blocks(), 3u);
  EXPECT_EQ(router->num_workers(), 2);
  for (int i = 0; i < 50; ++i) EXPECT_NE(router->Route(prompt).value().worker_id, "a");
  router->Free("in-flight");  // of the removed worker: harmless
  ASSERT_TRUE(router->AddWorker("a").ok());  // back with nothing cached, events from 1 again
  for (const auto& s : router->Workers()) {
    if (s.worker_id == "a") {
      EXPECT_EQ(s.num_cached_blocks, 0u);
      EXPECT_EQ(s.predicted_decode_blocks, 0);
      EXPECT_EQ(s.next_event_id, 1u);
    }
  }
  router->RemoveWorker("nobody");
}

TEST(KvRouterTest, AnUnroutableWorkerKeepsItsBlocksButGetsNoTrafficInEveryMode) {
  for (RouterMode mode : {RouterMode::kKv, RouterMode::kRoundRobin, RouterMode::kRandom}) {
    auto router = Make(mode);
    const std::vector<uint64_t> prompt = Chain(8);
    Store(*router, "a", prompt, 1);  // "a" holds the whole prompt: kv would pick it
    ASSERT_TRUE(router->SetRoutable("a", false).ok());
    ASSERT_TRUE(router->SetRoutable("a", false).ok());  // again: a no-op
    EXPECT_EQ(router->num_workers(), 3);
    EXPECT_EQ(router->num_indexed_blocks(), 8u);
    for (int i = 0; i < 30; ++i) {
      EXPECT_NE(router->Route(prompt).value().worker_id, "a") << RouterModeName(mode);
    }
    for (const auto& s : router->Workers()) EXPECT_EQ(s.routable, s.worker_id != "a");
    // Its events still apply while it is out of the choice.
    Store(*router, "a", Chain(2, 7), 2);
    ASSERT_TRUE(router->SetRoutable("b", false).ok());
    ASSERT_TRUE(router->SetRoutable("c", false).ok());
    Result<RoutingDecision> none = router->Route(prompt);
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(none.status().message().find("no routable worker"), std::string::npos);
    ASSERT_TRUE(router->SetRoutable("a", true).ok());
    EXPECT_EQ(router->Route(prompt).value().worker_id, "a") << RouterModeName(mode);
    // Removing an unroutable worker and adding it again: routable, nothing cached.
    router->RemoveWorker("b");
    ASSERT_TRUE(router->AddWorker("b").ok());
    ASSERT_TRUE(router->SetRoutable("a", false).ok());
    EXPECT_EQ(router->Route(prompt).value().worker_id, "b") << RouterModeName(mode);
    EXPECT_EQ(router->SetRoutable("nobody", true).code(), StatusCode::kNotFound);
  }
}

TEST(KvRouterTest, Errors) {
  KvRouter router(KvRouterConfig{});
  EXPECT_EQ(router.Route(Chain(2)).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(router.AddWorker("").code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(router.AddWorker("a").ok());
  EXPECT_EQ(router.AddWorker("a").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(router.UpdateLoad("b", KvLoad{}).code(), StatusCode::kNotFound);
  KvRouterConfig bad;
  bad.temperature = -1;
  EXPECT_EQ(KvRouter::Create(bad).status().code(), StatusCode::kInvalidArgument);
  bad = KvRouterConfig{};
  bad.overlap_weight = NAN;
  EXPECT_EQ(KvRouter::Create(bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseRouterMode("kv").value(), RouterMode::kKv);
  EXPECT_EQ(ParseRouterMode("round-robin").value(), RouterMode::kRoundRobin);
  EXPECT_EQ(ParseRouterMode("random").value(), RouterMode::kRandom);
  EXPECT_EQ(ParseRouterMode("fastest").status().code(), StatusCode::kInvalidArgument);
  EXPECT_STREQ(RouterModeName(RouterMode::kRoundRobin), "round-robin");
}

TEST(KvRouterTest, RouteTokensHashesLikeTheEngine) {
  KvRouterConfig config;
  config.block_size = 4;
  KvRouter router(config);
  ASSERT_TRUE(router.AddWorker("a").ok());
  std::vector<int32_t> tokens(18);
  for (int i = 0; i < 18; ++i) tokens[i] = 100 + i;
  const std::vector<uint64_t> hashes = ComputeBlockHashes(tokens, 4);
  ASSERT_EQ(hashes.size(), 4u);
  Store(router, "a", std::span(hashes).first(3), 1);
  RoutingDecision d = router.RouteTokens(tokens).value();
  EXPECT_EQ(d.num_prompt_blocks, 4);
  EXPECT_EQ(d.overlap_blocks, 3);
}

TEST(KvEventsJsonTest, RoundTripsAndRejectsBadInput) {
  const std::vector<KvEvent> events = {
      {1, KvStoredEvent{0, {1, 0xFFFFFFFFFFFFFFFFull}}},
      {2, KvRemovedEvent{{0xDEADBEEFCAFEF00Dull}}},
      {3, KvClearedEvent{}},
  };
  for (const KvEvent& e : events) {
    const std::string text = ToJson(e).dump();
    auto back = KvEventFromJson(nlohmann::json::parse(text));
    ASSERT_TRUE(back.ok()) << text;
    EXPECT_EQ(*back, e) << text;
  }
  EXPECT_EQ(ToJson(events[0]).dump(),
            R"({"data":{"stored":{"block_hashes":[1,18446744073709551615],"parent_hash":0}},"event_id":1})");
  KvCacheSnapshot s;
  s.last_event_id = 9;
  s.blocks = {{5, 0}, {6, 5}};
  s.load = KvLoad{3, 10, 1, 2};
  auto back = KvCacheSnapshotFromJson(nlohmann::json::parse(ToJson(s).dump()));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->last_event_id, 9u);
  EXPECT_EQ(back->blocks, s.blocks);
  EXPECT_EQ(back->load, s.load);
  for (const char* bad : {R"({"event_id":1})", R"({"event_id":-1,"data":{"cleared":{}}})",
                          R"({"event_id":1,"data":{"moved":{}}})",
                          R"({"event_id":1,"data":{"removed":{"block_hashes":[-3]}}})",
                          R"({"event_id":1,"data":{"stored":{"block_hashes":[3]}}})"}) {
    EXPECT_FALSE(KvEventFromJson(nlohmann::json::parse(bad)).ok()) << bad;
  }
  EXPECT_FALSE(KvLoadFromJson(nlohmann::json::parse(R"({"num_active_blocks":1})")).ok());
}

}  // namespace
}  // namespace tandem::router
