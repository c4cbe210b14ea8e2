// KvEventPublisher (worker/kv_event_publisher.h) on a real AsyncEngine (fake model runner) behind
// a real WorkerServer, through the embedded event plane: every batch arrives decodable with
// consecutive event_ids and the load; replaying them gives the engine's cached blocks; a snapshot
// fetched over Worker.Snapshot while requests run, followed by the events published after its
// sequence, gives exactly the final cache (the consistency the header promises).
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "discovery/file_discovery.h"
#include "events/kv_event_codec.h"
#include "kv_worker_util.h"
#include "router/kv_router.h"
#include "rpc/event_plane_factory.h"

namespace tandem::worker {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::Eventually;
using testing::Prompt;
using testing::Request;
using testing::TestWorker;

class KvEventPublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tandem-kvpub-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    discovery_ = runtime::MakeFileDiscovery({root_.string(), 3000ms, 1000ms});
    worker_ = TestWorker::Start("w1", "pub", discovery_, /*num_blocks=*/48);
    runtime::EventPlaneOptions o;
    o.discovery = discovery_;
    o.namespace_name = "pub";
    o.discovery_interval = 50ms;
    auto plane = runtime::MakeEventPlane(o);
    ASSERT_TRUE(plane.ok()) << plane.status().ToString();
    plane_ = std::move(*plane);
    runtime::EventHandlers h;
    h.on_event = [this](const runtime::Event& e) {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(e);
    };
    h.on_gap = [this](const runtime::EventGap&) { gaps_++; };
    auto sub = plane_->Subscribe(runtime::KvEventsSubject("pub"), std::move(h));
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    sub_ = std::move(*sub);
  }
  void TearDown() override {
    sub_.reset();
    plane_.reset();
    worker_.reset();
    discovery_.reset();
    fs::remove_all(root_);
  }

  // Runs `n` requests over a few shared prefixes (small pool: evictions too) and waits for them.
  void RunRequests(int n, int first = 0) {
    std::atomic<int> done{0};
    for (int i = first; i < first + n; ++i) {
      ASSERT_TRUE(worker_->engine
                      ->Submit(Request("r" + std::to_string(i), Prompt(i % 3, 20, i), 3),
                               [&](RequestOutput out) {
                                 if (out.finished) done++;
                               })
                      .ok());
    }
    ASSERT_TRUE(Eventually([&] { return done.load() == n; }, 30s));
  }
  std::vector<runtime::Event> Events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  KvCacheSnapshot EngineSnapshot() {
    Result<KvCacheSnapshot> s = worker_->engine->SnapshotCachedBlocks().get();
    EXPECT_TRUE(s.ok());
    return s.ok() ? *s : KvCacheSnapshot{};
  }
  static std::set<uint64_t> Hashes(const KvCacheSnapshot& s) {
    std::set<uint64_t> out;
    for (const KvCachedBlock& b : s.blocks) out.insert(b.block_hash);
    return out;
  }

  fs::path root_;
  std::shared_ptr<runtime::Discovery> discovery_;
  std::unique_ptr<TestWorker> worker_;
  std::unique_ptr<runtime::EventPlane> plane_;
  std::unique_ptr<runtime::Subscription> sub_;
  std::mutex mu_;
  std::vector<runtime::Event> events_;
  std::atomic<int> gaps_{0};
};

TEST_F(KvEventPublisherTest, EveryBatchArrivesWithConsecutiveIdsAndLoadAndReplaysToTheCache) {
  // Subscribed before any event: the plane delivers from sequence 1.
  RunRequests(12);
  const KvCacheSnapshot snap = EngineSnapshot();  // flushes the engine's pending events
  ASSERT_TRUE(Eventually([&] {
    auto c = worker_->publisher->counters();
    const auto ev = Events();
    return c.events_published >= snap.last_event_id && !ev.empty() &&
           ev.back().sequence == c.last_sequence;
  }));
  EXPECT_EQ(gaps_.load(), 0);
  router::KvRouterConfig rc;
  rc.block_size = 4;
  router::KvRouter r(rc);
  ASSERT_TRUE(r.AddWorker("w1").ok());
  uint64_t next_id = 1, seq = 0;
  bool saw_load = false;
  for (const runtime::Event& e : Events()) {
    EXPECT_EQ(e.worker_id, "w1");
    EXPECT_EQ(e.sequence, ++seq);
    Result<KvEventBatch> b = runtime::DecodeKvEventBatch(e.payload);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    for (const KvEvent& k : b->events) EXPECT_EQ(k.event_id, next_id++);
    saw_load = saw_load || b->load.num_total_blocks == 48;
    auto applied = r.ApplyEvents("w1", b->events);
    ASSERT_TRUE(applied.ok());
    EXPECT_FALSE(applied->needs_snapshot);
  }
  EXPECT_TRUE(saw_load);
  EXPECT_EQ(next_id - 1, snap.last_event_id);
  EXPECT_GT(snap.last_event_id, 3u);
  EXPECT_EQ(r.Workers()[0].num_cached_blocks, snap.blocks.size());
  EXPECT_EQ(worker_->publisher->counters().events_dropped, 0u);
}

TEST_F(KvEventPublisherTest, ASnapshotThenTheEventsAfterItsSequenceIsExactUnderLoad) {
  RunRequests(6);
  // Requests keep running on another thread while the snapshot is fetched.
  std::atomic<bool> fetched_yet{false};
  // Rounds of requests until two have started after the snapshot was fetched: a round that was
  // already finishing when the fetch returned may publish nothing after it (seen on a loaded
  // 2-core box: num_after 0).
  std::thread load([&] {
    int started_after = 0;
    for (int round = 0; round < 200 && (started_after < 2 || round < 10); ++round) {
      if (fetched_yet.load()) ++started_after;
      RunRequests(4, 100 + 4 * round);
    }
  });
  std::this_thread::sleep_for(20ms);
  Result<runtime::EventSnapshot> fetched = runtime::FetchSnapshot(
      worker_->server->endpoint(), runtime::KvEventsSubject("pub"), 10s);
  fetched_yet = true;
  load.join();
  ASSERT_TRUE(fetched.ok()) << fetched.status().ToString();
  EXPECT_EQ(fetched->worker_id, "w1");
  Result<KvCacheSnapshot> snap = runtime::DecodeKvCacheSnapshot(fetched->payload);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();

  const KvCacheSnapshot final_snap = EngineSnapshot();
  ASSERT_TRUE(Eventually([&] {
    const auto ev = Events();
    return !ev.empty() && ev.back().sequence == worker_->publisher->counters().last_sequence;
  }));
  router::KvRouterConfig rc;
  rc.block_size = 4;
  router::KvRouter r(rc);
  ASSERT_TRUE(r.AddWorker("w1").ok());
  ASSERT_TRUE(r.ApplySnapshot("w1", *snap).ok());
  int num_after = 0;
  for (const runtime::Event& e : Events()) {
    Result<KvEventBatch> batch = runtime::DecodeKvEventBatch(e.payload);
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    if (e.sequence <= fetched->sequence) {
      // Nothing newer than the snapshot was published at or before its sequence.
      for (const KvEvent& k : batch->events) {
        EXPECT_LE(k.event_id, snap->last_event_id) << "sequence " << e.sequence;
      }
      continue;
    }
    num_after += !batch->events.empty();
    auto applied = r.ApplyEvents("w1", batch->events);
    ASSERT_TRUE(applied.ok());
    EXPECT_FALSE(applied->needs_snapshot) << "sequence " << e.sequence;
  }
  EXPECT_GT(num_after, 0) << "the snapshot was not taken while requests ran";
  EXPECT_EQ(r.Workers()[0].next_event_id, final_snap.last_event_id + 1);
  EXPECT_EQ(r.Workers()[0].num_cached_blocks, final_snap.blocks.size());
  EXPECT_EQ(r.num_indexed_blocks(), final_snap.blocks.size());
}

TEST_F(KvEventPublisherTest, SnapshotOfAnotherSubjectOrWithoutEngineIsAClearError) {
  auto other = runtime::FetchSnapshot(worker_->server->endpoint(), "other.kv_events", 5s);
  EXPECT_FALSE(other.ok());
  KvEventPublisher lone({});
  auto none = lone.snapshot_provider()("tandem.kv_events");
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tandem::worker
