// RemoteEngineClient (rpc/remote_engine_client.h, "lost worker") over two real workers
// (kv_worker_util.h) in a file discovery, with no Health poll after the first (refresh_interval
// of an hour): a worker whose server stops but which discovery still lists (a killed process,
// before its lease expires) fails one request with UNAVAILABLE (worker_lost), and from then on no
// new request goes to it, round-robin or with the KV router as the selector (which keeps its
// blocks but takes it out of the choice); a Health poll that finds it serving again brings it back.
// The router's resync of such a worker logs its first failed snapshot as a warning, the rest at
// debug level, and its recovery.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "../worker/kv_worker_util.h"
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

struct Outcome {
  bool ok = false;    // finished without an error
  bool lost = false;  // ended with worker_lost
};

class LostWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tandem-lostworker-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    discovery_ = runtime::MakeFileDiscovery({root_.string(), 3000ms, 1000ms});
    workers_["w1"] = TestWorker::Start("w1", "lw", discovery_);
    workers_["w2"] = TestWorker::Start("w2", "lw", discovery_);
  }
  void TearDown() override {
    client_.reset();
    routing_.reset();
    plane_.reset();
    workers_.clear();
    discovery_.reset();
    fs::remove_all(root_);
  }
  // The client (and with `kv`, the KV router as its selector); Health is polled once, at start.
  void StartClient(bool kv) {
    runtime::RemoteEngineClientOptions co;
    co.namespace_name = "lw";
    co.refresh_interval = std::chrono::hours(1);
    if (kv) {
      runtime::EventPlaneOptions o;
      o.discovery = discovery_;
      o.namespace_name = "lw";
      o.discovery_interval = 50ms;
      auto plane = runtime::MakeEventPlane(o);
      ASSERT_TRUE(plane.ok()) << plane.status().ToString();
      plane_ = std::move(*plane);
      runtime::KvRoutingOptions ro;
      ro.namespace_name = "lw";
      ro.retry_interval = 100ms;
      auto routing = runtime::KvRouting::Create(plane_, ro);
      ASSERT_TRUE(routing.ok()) << routing.status().ToString();
      routing_ = *routing;
      recording_ = std::make_shared<RecordingSelector>(routing_);
      co.selector = recording_;
    }
    client_ = std::make_unique<runtime::RemoteEngineClient>(discovery_, co);
    ASSERT_TRUE(Eventually([&] {
      if (client_->Workers().size() != 2) return false;
      return !routing_ || routing_->router()->num_workers() == 2;
    }));
  }
  Outcome Generate(const std::string& id, std::vector<int32_t> prompt) {
    std::atomic<int> state{0};  // 1 ok, 2 error, 3 error with worker_lost
    Status st = client_->Submit(Request(id, std::move(prompt), 2), [&](RequestOutput out) {
      if (out.finished) {
        state = out.finish_reason != FinishReason::kError ? 1 : out.worker_lost ? 3 : 2;
      }
    });
    if (!st.ok()) return {};
    EXPECT_TRUE(Eventually([&] { return state.load() != 0; }, 30s)) << id;
    return {state.load() == 1, state.load() == 3};
  }
  // Stops the worker's server; its discovery entry stays (as a killed worker's does until its
  // lease expires). Returns its port.
  int Kill(const std::string& id) {
    const int port = workers_[id]->server->port();
    workers_[id]->server->Stop(0);
    workers_[id]->server.reset();
    return port;
  }
  // Serves the worker's engine again on `port`.
  void Revive(const std::string& id, int port) {
    TestWorker& w = *workers_[id];
    runtime::WorkerServerOptions so{"127.0.0.1", port};
    so.events = w.ring;
    so.snapshot = w.publisher->snapshot_provider();
    w.server = std::make_unique<runtime::WorkerServer>(w.engine, so);
    ASSERT_TRUE(w.server->Start().ok());
  }
  bool Healthy(const std::string& id) {
    for (const auto& w : client_->Workers()) {
      if (w.instance.instance_id == id) return w.healthy;
    }
    return false;
  }
  bool Routable(const std::string& id) {
    for (const auto& w : routing_->router()->Workers()) {
      if (w.worker_id == id) return w.routable;
    }
    return false;
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
  std::shared_ptr<runtime::EventPlane> plane_;
  std::shared_ptr<runtime::KvRouting> routing_;
  std::shared_ptr<RecordingSelector> recording_;
  std::unique_ptr<runtime::RemoteEngineClient> client_;
};

TEST_F(LostWorkerTest, RoundRobinSkipsAWorkerOnceACallFoundItGone) {
  StartClient(/*kv=*/false);
  Kill("w1");
  // Without the mark, round-robin sends every other request to w1: 4 of 8 would fail.
  int failed = 0;
  for (int i = 0; i < 8; ++i) {
    const Outcome o = Generate("rr" + std::to_string(i), Prompt(1, 8, i));
    if (!o.ok) {
      ++failed;
      EXPECT_TRUE(o.lost) << i;
      EXPECT_FALSE(Healthy("w1"));  // marked before the final output was delivered
    }
  }
  EXPECT_LE(failed, 1);
  EXPECT_TRUE(Healthy("w2"));
}

TEST_F(LostWorkerTest, TheKvRouterTakesALostWorkerOutOfTheChoiceUntilHealthSaysItIsBack) {
  StartClient(/*kv=*/true);
  ASSERT_TRUE(Generate("first", Prompt(2, 40, 0)).ok);
  const std::string holder = recording_->Chosen("first");
  ASSERT_TRUE(holder == "w1" || holder == "w2") << holder;
  const std::string other = holder == "w1" ? "w2" : "w1";
  ASSERT_TRUE(Eventually([&] { return Overlap(holder, Prompt(2, 40, 1)) >= 10; }));
  const int port = Kill(holder);
  // The router still prefers the holder: the first request after the kill goes there and is lost.
  const Outcome lost = Generate("lost", Prompt(2, 40, 1));
  EXPECT_FALSE(lost.ok);
  EXPECT_TRUE(lost.lost);
  EXPECT_EQ(recording_->Chosen("lost"), holder);
  EXPECT_FALSE(Healthy(holder));
  EXPECT_FALSE(Routable(holder));
  EXPECT_GE(Overlap(holder, Prompt(2, 40, 1)), 10);  // its blocks stay indexed
  // Without the mark every one of these would go to the holder and fail (no Health poll here).
  for (int i = 2; i <= 5; ++i) {
    const std::string id = "after-" + std::to_string(i);
    EXPECT_TRUE(Generate(id, Prompt(2, 40, i)).ok) << id;
    EXPECT_EQ(recording_->Chosen(id), other) << id;
  }
  // Serving again on the same endpoint: a Health poll brings it back into the choice.
  // (The channel reconnects after its backoff, at most 1 s: the first polls may still fail.)
  Revive(holder, port);
  EXPECT_TRUE(Eventually([&] {
    client_->Refresh();
    return Healthy(holder);
  }, 10s));
  EXPECT_TRUE(Routable(holder));
  // "first"'s prompt: the holder has one block more of it cached than the other.
  ASSERT_TRUE(Generate("back", Prompt(2, 40, 0)).ok);
  EXPECT_EQ(recording_->Chosen("back"), holder);
}

TEST_F(LostWorkerTest, FailedResyncsOfAnUnreachableWorkerWarnOnceAndItsRecoveryIsLogged) {
  // What the process logs from here on, also in memory.
  auto captured = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(4096);
  spdlog::default_logger()->sinks().push_back(captured);
  struct Unhook {
    std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink;
    ~Unhook() {
      auto& sinks = spdlog::default_logger()->sinks();
      sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
    }
  } unhook{captured};
  auto count = [&](spdlog::level::level_enum level, const std::string& text) {
    int n = 0;
    for (const auto& m : captured->last_raw()) {
      n += m.level == level &&
           std::string_view(m.payload.data(), m.payload.size()).find(text) != std::string_view::npos;
    }
    return n;
  };
  const std::string endpoint = workers_["w1"]->server->endpoint();
  const int port = Kill("w1");
  runtime::KvRoutingOptions ro;
  ro.namespace_name = "lw";
  ro.retry_interval = 20ms;
  ro.snapshot_timeout = 500ms;
  auto routing = runtime::KvRouting::Create(std::shared_ptr<runtime::EventPlane>(), ro);
  ASSERT_TRUE(routing.ok());
  routing_ = *routing;
  runtime::InstanceInfo w1;
  w1.namespace_name = "lw";
  w1.component = runtime::kComponentAgg;
  w1.instance_id = "w1";
  w1.endpoint = endpoint;
  w1.metadata = {{"model", "fake"}, {"block_size", 4}};
  routing_->SetWorkers({w1});  // listed, not serving: its snapshot fetch fails every 20 ms
  ASSERT_TRUE(Eventually([&] { return routing_->counters().errors >= 6; }))
      << routing_->counters().errors;
  EXPECT_EQ(count(spdlog::level::warn, "snapshot of worker w1"), 1);
  Revive("w1", port);
  ASSERT_TRUE(Eventually([&] { return routing_->counters().snapshots_applied >= 1; }, 10s));
  EXPECT_EQ(count(spdlog::level::info, "snapshot of worker w1 (" + endpoint + ") fetched after"), 1);
  EXPECT_EQ(count(spdlog::level::warn, "snapshot of worker w1"), 1);
  routing_.reset();
}

}  // namespace
}  // namespace tandem::worker
