// KvRouting (router/kv_routing.h) as RemoteEngineClient's selector over two real workers
// (AsyncEngine on the fake model runner, KvEventPublisher, WorkerServer; kv_worker_util.h) through
// the embedded event plane and file discovery: requests sharing a prefix go to the worker that
// cached it; a departed worker's blocks leave the index and requests still succeed; a router that
// starts after the workers cached blocks learns them from their snapshots; the metrics.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>

#include <gtest/gtest.h>

#include "../worker/kv_worker_util.h"
#include "common/metrics.h"
#include "discovery/file_discovery.h"
#include "engine/block_hash.h"
#include "router/kv_routing.h"
#include "rpc/event_plane_factory.h"
#include "rpc/remote_engine_client.h"

namespace tandem::worker {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::Eventually;
using testing::Prompt;
using testing::RecordingSelector;
using testing::Request;
using testing::TestWorker;

class KvRoutingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tandem-kvroute-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    discovery_ = runtime::MakeFileDiscovery({root_.string(), 3000ms, 1000ms});
    workers_["w1"] = TestWorker::Start("w1", "rt", discovery_);
    workers_["w2"] = TestWorker::Start("w2", "rt", discovery_);
  }
  void TearDown() override {
    client_.reset();
    routing_.reset();
    plane_.reset();
    workers_.clear();
    discovery_.reset();
    fs::remove_all(root_);
  }
  void StartRouting() {
    runtime::EventPlaneOptions o;
    o.discovery = discovery_;
    o.namespace_name = "rt";
    o.discovery_interval = 50ms;
    auto plane = runtime::MakeEventPlane(o);
    ASSERT_TRUE(plane.ok()) << plane.status().ToString();
    plane_ = std::move(*plane);
    runtime::KvRoutingOptions ro;
    ro.namespace_name = "rt";
    ro.metrics = &registry_;
    ro.retry_interval = 100ms;
    auto routing = runtime::KvRouting::Create(plane_, ro);
    ASSERT_TRUE(routing.ok()) << routing.status().ToString();
    routing_ = *routing;
    recording_ = std::make_shared<RecordingSelector>(routing_);
    runtime::RemoteEngineClientOptions co;
    co.namespace_name = "rt";
    co.refresh_interval = 50ms;
    co.selector = recording_;
    client_ = std::make_unique<runtime::RemoteEngineClient>(discovery_, co);
    ASSERT_TRUE(Eventually([&] {
      return client_->Workers().size() == workers_.size() &&
             routing_->router()->num_workers() == static_cast<int>(workers_.size());
    })) << routing_->router()->num_workers();
  }
  // Sends one request through the client and waits for its final output; true when it finished
  // without an error.
  bool Generate(const std::string& id, std::vector<int32_t> prompt) {
    std::atomic<int> state{0};  // 1 ok, 2 error
    Status st = client_->Submit(Request(id, std::move(prompt), 2), [&](RequestOutput out) {
      if (out.finished) state = out.finish_reason == FinishReason::kError ? 2 : 1;
    });
    if (!st.ok()) return false;
    EXPECT_TRUE(Eventually([&] { return state.load() != 0; }, 30s));
    return state.load() == 1;
  }
  int Overlap(const std::string& worker, const std::vector<int32_t>& prompt) {
    auto hashes = ComputeBlockHashes(prompt, 4);
    for (const auto& [id, n] : routing_->router()->Overlaps(hashes)) {
      if (id == worker) return n;
    }
    return -1;
  }

  fs::path root_;
  std::shared_ptr<runtime::Discovery> discovery_;
  std::map<std::string, std::unique_ptr<TestWorker>> workers_;
  metrics::Registry registry_;
  std::shared_ptr<runtime::EventPlane> plane_;
  std::shared_ptr<runtime::KvRouting> routing_;
  std::shared_ptr<RecordingSelector> recording_;
  std::unique_ptr<runtime::RemoteEngineClient> client_;
};

TEST_F(KvRoutingTest, RequestsSharingAPrefixGoToTheWorkerThatCachedIt) {
  StartRouting();
  ASSERT_TRUE(Generate("first", Prompt(1, 40, 0)));
  const std::string holder = recording_->Chosen("first");
  ASSERT_TRUE(holder == "w1" || holder == "w2") << holder;
  const std::string other = holder == "w1" ? "w2" : "w1";
  // The holder's events reach the router: the 10 prefix blocks are indexed under it.
  ASSERT_TRUE(Eventually([&] { return Overlap(holder, Prompt(1, 40, 99)) >= 10; }))
      << Overlap(holder, Prompt(1, 40, 99));
  const EngineStats other_before = workers_[other]->engine->Stats().engine;
  const uint64_t hits_before = workers_[holder]->engine->Stats().engine.prefix_cache_hits;
  for (int i = 1; i <= 6; ++i) {
    const std::string id = "same-prefix-" + std::to_string(i);
    ASSERT_TRUE(Generate(id, Prompt(1, 40, i)));
    EXPECT_EQ(recording_->Chosen(id), holder) << id;
  }
  // The holder served them from its cache; the other worker saw none of them.
  EXPECT_GE(workers_[holder]->engine->Stats().engine.prefix_cache_hits, hits_before + 6 * 40);
  EXPECT_EQ(workers_[other]->engine->Stats().engine.prefix_cache_queries,
            other_before.prefix_cache_queries);
  EXPECT_EQ(recording_->finished_.load(), 7);  // every final output freed its prediction
  for (const auto& w : routing_->router()->Workers()) {
    EXPECT_EQ(w.predicted_prefill_blocks, 0) << w.worker_id;
  }
  const std::string text = registry_.RenderText();
  EXPECT_NE(text.find("tandem_router_decisions_total{mode=\"kv\"} 7"), std::string::npos) << text;
  EXPECT_NE(text.find("tandem_router_overlap_blocks_count 7"), std::string::npos) << text;
  EXPECT_NE(text.find("tandem_router_worker_cached_blocks{worker=\"" + holder + "\"}"),
            std::string::npos);
}

TEST_F(KvRoutingTest, ADepartedWorkersBlocksLeaveTheIndexAndRequestsStillSucceed) {
  StartRouting();
  ASSERT_TRUE(Generate("a", Prompt(2, 40, 0)));
  const std::string holder = recording_->Chosen("a");
  const std::string other = holder == "w1" ? "w2" : "w1";
  ASSERT_TRUE(Eventually([&] { return Overlap(holder, Prompt(2, 40, 1)) >= 10; }));
  const size_t indexed = routing_->num_indexed_blocks();
  ASSERT_GE(indexed, 10u);
  workers_.erase(holder);  // leaves discovery, stops serving
  ASSERT_TRUE(Eventually([&] { return !routing_->router()->HasWorker(holder); }));
  EXPECT_EQ(Overlap(holder, Prompt(2, 40, 1)), -1);
  EXPECT_LT(routing_->num_indexed_blocks(), indexed);
  EXPECT_EQ(routing_->num_indexed_blocks(), routing_->router()->Workers()[0].num_cached_blocks);
  for (int i = 0; i < 3; ++i) {
    const std::string id = "after-" + std::to_string(i);
    EXPECT_TRUE(Generate(id, Prompt(2, 40, 10 + i))) << id;
    EXPECT_EQ(recording_->Chosen(id), other);
  }
  EXPECT_NE(registry_.RenderText().find("tandem_router_worker_cached_blocks{worker=\"" + holder +
                                        "\"} 0"),
            std::string::npos);
}

TEST_F(KvRoutingTest, ARouterStartedLaterLearnsTheCachedBlocksFromSnapshots) {
  // w2 caches a prefix before any router exists.
  std::atomic<bool> done{false};
  ASSERT_TRUE(workers_["w2"]->engine->Submit(Request("early", Prompt(3, 40, 0)), [&](RequestOutput o) {
    if (o.finished) done = true;
  }).ok());
  ASSERT_TRUE(Eventually([&] { return done.load(); }));
  StartRouting();
  ASSERT_TRUE(Eventually([&] { return Overlap("w2", Prompt(3, 40, 5)) >= 10; }))
      << Overlap("w2", Prompt(3, 40, 5));
  // One per worker on joining (w1's may land after w2's).
  EXPECT_TRUE(Eventually([&] { return routing_->counters().snapshots_applied >= 2u; }))
      << routing_->counters().snapshots_applied;
  ASSERT_TRUE(Generate("late", Prompt(3, 40, 5)));
  EXPECT_EQ(recording_->Chosen("late"), "w2");
}

TEST_F(KvRoutingTest, RoundRobinModeAlternatesAndIsCounted) {
  runtime::EventPlaneOptions o;
  o.discovery = discovery_;
  o.namespace_name = "rt";
  auto plane = runtime::MakeEventPlane(o);
  ASSERT_TRUE(plane.ok());
  runtime::KvRoutingOptions ro;
  ro.namespace_name = "rt";
  ro.metrics = &registry_;
  ro.router.mode = router::RouterMode::kRoundRobin;
  auto routing = runtime::KvRouting::Create(std::move(*plane), ro);
  ASSERT_TRUE(routing.ok());
  EXPECT_NE((*routing)->Describe().find("round-robin"), std::string::npos);
  routing_ = *routing;
  recording_ = std::make_shared<RecordingSelector>(routing_);
  runtime::RemoteEngineClientOptions co;
  co.namespace_name = "rt";
  co.refresh_interval = 50ms;
  co.selector = recording_;
  client_ = std::make_unique<runtime::RemoteEngineClient>(discovery_, co);
  ASSERT_TRUE(Eventually([&] { return routing_->router()->num_workers() == 2; }));
  ASSERT_TRUE(Eventually([&] { return client_->Workers().size() == 2; }));
  std::map<std::string, int> count;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Generate("rr" + std::to_string(i), Prompt(4, 40, 0)));
    count[recording_->Chosen("rr" + std::to_string(i))]++;
  }
  EXPECT_EQ(count["w1"], 2);
  EXPECT_EQ(count["w2"], 2);
  EXPECT_NE(registry_.RenderText().find("tandem_router_decisions_total{mode=\"round-robin\"} 4"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem::worker
