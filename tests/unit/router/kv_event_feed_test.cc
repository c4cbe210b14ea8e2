// KvEventFeed (router/kv_event_feed.h) as the frontend wires it: one prefill and one decode worker
// (kv_worker_util.h) in a file discovery, the embedded event plane behind a counting decorator,
// the decode pool's KvRouting and the prefill pool's (WithPrefillRouting) on one feed: the plane
// is subscribed once and every batch a worker publishes reaches the frontend once, and goes to the
// router of that worker's pool only.
#include <unistd.h>

#include <atomic>
#include <filesystem>

#include <gtest/gtest.h>

#include "../worker/kv_worker_util.h"
#include "discovery/file_discovery.h"
#include "engine/block_hash.h"
#include "router/kv_event_feed.h"
#include "router/kv_routing.h"
#include "router/prefill_router.h"
#include "rpc/event_plane_factory.h"
#include "rpc/remote_engine_client.h"

namespace tandem::worker {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::Eventually;
using testing::Prompt;
using testing::Request;
using testing::TestWorker;

// Counts Subscribe calls and the events the plane hands to subscribers.
class CountingPlane final : public runtime::EventPlane {
 public:
  explicit CountingPlane(std::shared_ptr<runtime::EventPlane> inner) : inner_(std::move(inner)) {}
  Result<uint64_t> Publish(const std::string& subject, std::string_view payload) override {
    return inner_->Publish(subject, payload);
  }
  Result<std::unique_ptr<runtime::Subscription>> Subscribe(const std::string& subject,
                                                           runtime::EventHandlers h) override {
    subscriptions++;
    auto on_event = std::move(h.on_event);
    h.on_event = [this, on_event](const runtime::Event& e) {
      deliveries++;
      on_event(e);
    };
    return inner_->Subscribe(subject, std::move(h));
  }
  Status Flush(std::chrono::milliseconds timeout) override { return inner_->Flush(timeout); }
  std::string url() const override { return inner_->url(); }

  std::atomic<int> subscriptions{0};
  std::atomic<uint64_t> deliveries{0};

 private:
  std::shared_ptr<runtime::EventPlane> inner_;
};

class KvEventFeedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tandem-kvfeed-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    discovery_ = runtime::MakeFileDiscovery({root_.string(), 3000ms, 1000ms});
    prefill_ = TestWorker::Start("p1", "fd", discovery_, 256, 4, runtime::kComponentPrefill);
    decode_ = TestWorker::Start("d1", "fd", discovery_, 256, 4, runtime::kComponentDecode);
  }
  void TearDown() override {
    served_.reset();
    client_.reset();
    routing_.reset();
    feed_.reset();
    plane_.reset();
    prefill_.reset();
    decode_.reset();
    discovery_.reset();
    fs::remove_all(root_);
  }
  void Cache(TestWorker& w, const std::string& id, std::vector<int32_t> prompt) {
    std::atomic<bool> done{false};
    ASSERT_TRUE(w.engine->Submit(Request(id, std::move(prompt)), [&](RequestOutput o) {
      if (o.finished) done = true;
    }).ok());
    ASSERT_TRUE(Eventually([&] { return done.load(); }));
  }
  uint64_t Published() const {
    const std::string subject = runtime::KvEventsSubject("fd");
    return prefill_->ring->last_sequence(subject) + decode_->ring->last_sequence(subject);
  }

  fs::path root_;
  std::shared_ptr<runtime::Discovery> discovery_;
  std::unique_ptr<TestWorker> prefill_, decode_;
  std::shared_ptr<CountingPlane> plane_;
  std::shared_ptr<runtime::KvEventFeed> feed_;
  std::shared_ptr<runtime::KvRouting> routing_;
  std::shared_ptr<runtime::RemoteEngineClient> client_;
  std::shared_ptr<EngineClient> served_;
};

TEST_F(KvEventFeedTest, ThePrefillAndDecodeRoutersShareOneSubscriptionAndGetEachBatchOnce) {
  runtime::EventPlaneOptions o;
  o.discovery = discovery_;
  o.namespace_name = "fd";
  o.discovery_interval = 50ms;
  auto made = runtime::MakeEventPlane(o);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  plane_ = std::make_shared<CountingPlane>(std::move(*made));
  // The frontend's wiring (cli/frontend.cc).
  auto feed = runtime::KvEventFeed::Create(plane_, "fd");
  ASSERT_TRUE(feed.ok()) << feed.status().ToString();
  feed_ = *feed;
  runtime::KvRoutingOptions ro;
  ro.namespace_name = "fd";
  auto routing = runtime::KvRouting::Create(feed_, ro);
  ASSERT_TRUE(routing.ok()) << routing.status().ToString();
  routing_ = *routing;
  runtime::RemoteEngineClientOptions co;
  co.namespace_name = "fd";
  co.refresh_interval = 50ms;
  co.selector = routing_;
  client_ = std::make_shared<runtime::RemoteEngineClient>(discovery_, co);
  auto served = runtime::WithPrefillRouting(client_, discovery_, feed_, ro, "fake");
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  served_ = *served;
  ASSERT_TRUE(Eventually([&] { return routing_->router()->HasWorker("d1"); }));

  Cache(*prefill_, "p-a", Prompt(1, 40, 0));
  Cache(*prefill_, "p-b", Prompt(2, 40, 0));
  Cache(*decode_, "d-a", Prompt(3, 40, 0));
  const uint64_t published = Published();
  ASSERT_GE(published, 3u);
  ASSERT_TRUE(Eventually([&] { return plane_->deliveries.load() >= published; }))
      << plane_->deliveries.load() << " of " << published;
  std::this_thread::sleep_for(300ms);  // a second copy would have arrived by now
  EXPECT_EQ(plane_->subscriptions.load(), 1);
  EXPECT_EQ(plane_->deliveries.load(), Published());
  const runtime::KvEventFeed::Counters c = feed_->counters();
  EXPECT_EQ(c.batches, Published());
  EXPECT_EQ(c.deliveries + c.unclaimed, c.batches);  // each batch to one router at most
  EXPECT_GE(c.deliveries, 3u);
  // The decode router indexes the decode worker's blocks only.
  EXPECT_FALSE(routing_->router()->HasWorker("p1"));
  const auto hashes = ComputeBlockHashes(Prompt(3, 40, 1), 4);
  ASSERT_TRUE(Eventually([&] {
    for (const auto& [id, n] : routing_->router()->Overlaps(hashes)) {
      if (id == "d1") return n >= 10;
    }
    return false;
  }));
  EXPECT_EQ(routing_->num_indexed_blocks(), routing_->router()->Workers()[0].num_cached_blocks);
}

TEST_F(KvEventFeedTest, ARouterOfAnotherNamespaceIsRefused) {
  runtime::EventPlaneOptions o;
  o.discovery = discovery_;
  o.namespace_name = "fd";
  auto made = runtime::MakeEventPlane(o);
  ASSERT_TRUE(made.ok());
  auto feed = runtime::KvEventFeed::Create(std::shared_ptr<runtime::EventPlane>(std::move(*made)),
                                           "fd");
  ASSERT_TRUE(feed.ok());
  runtime::KvRoutingOptions ro;
  ro.namespace_name = "other";
  auto routing = runtime::KvRouting::Create(*feed, ro);
  ASSERT_FALSE(routing.ok());
  EXPECT_EQ(routing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(runtime::KvEventFeed::Create(nullptr, "fd").ok());
}

}  // namespace
}  // namespace tandem::worker
