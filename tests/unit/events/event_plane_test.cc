// The event plane (event_plane.h): framing, gap detection, the ring; then the same publish /
// subscribe / order / gap / server-gone tests against the embedded plane (workers' gRPC servers
// found through file discovery) and NATS (a real nats-server on a free loopback port).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "../discovery/cluster_servers.h"
#include "discovery/file_discovery.h"
#include "engine/echo_engine.h"
#include "events/event_plane.h"
#include "events/event_ring.h"
#include "rpc/event_plane_factory.h"
#include "rpc/worker_server.h"

namespace tandem::runtime {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::FreePort;
using testing::NatsServer;

template <typename F>
bool Eventually(F f, std::chrono::milliseconds timeout = 10s) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return f();
}

TEST(EventFrame, RoundTripAndTruncation) {
  const std::string frame = EncodeEventFrame("decode-1", 42, std::string("a\0b", 3));
  auto e = DecodeEventFrame("s", frame);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->worker_id, "decode-1");
  EXPECT_EQ(e->sequence, 42u);
  EXPECT_EQ(e->payload, std::string("a\0b", 3));
  EXPECT_EQ(DecodeEventFrame("s", frame.substr(0, 10)).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(DecodeEventFrame("s", "\x02xyz").status().code(), StatusCode::kDataLoss);
}

TEST(GapDetector, ReportsMissedAndRestartedSequences) {
  GapDetector d;
  auto ev = [](const char* w, uint64_t s) { return Event{"s", w, s, ""}; };
  EXPECT_FALSE(d.Check(ev("a", 1)));
  EXPECT_FALSE(d.Check(ev("a", 2)));
  EXPECT_FALSE(d.Check(ev("b", 1)));  // per worker
  auto gap = d.Check(ev("a", 5));
  ASSERT_TRUE(gap);
  EXPECT_EQ(gap->expected, 3u);
  EXPECT_EQ(gap->received, 5u);
  EXPECT_FALSE(d.Check(ev("a", 6)));
  auto restart = d.Check(ev("a", 1));
  ASSERT_TRUE(restart);
  EXPECT_EQ(restart->expected, 7u);
  EXPECT_EQ(restart->received, 1u);
  auto late = d.Check(ev("c", 9));  // joined late
  ASSERT_TRUE(late);
  EXPECT_EQ(late->expected, 1u);
}

TEST(EventRing, ReplaysWhatItHoldsThenListensPerSubject) {
  EventRing ring(3);
  for (int i = 0; i < 5; ++i) ring.Publish("s", "w", std::to_string(i));
  ring.Publish("t", "w", "other");
  std::vector<uint64_t> seen;
  ring.Listen("s", 2, [&](const Event& e) {
    seen.push_back(e.sequence);
    return seen.size() < 5;  // then it asks to be removed
  });
  EXPECT_EQ(seen, (std::vector<uint64_t>{3, 4, 5}));  // 1 and 2 are gone (capacity 3)
  ring.Publish("t", "w", "not mine");
  ring.Publish("s", "w", "6");
  ring.Publish("s", "w", "7");
  EXPECT_EQ(seen, (std::vector<uint64_t>{3, 4, 5, 6, 7}));
  EXPECT_EQ(ring.num_listeners(), 0u);
  ring.Publish("s", "w", "8");
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_EQ(ring.last_sequence("s"), 8u);
  EXPECT_NE(ring.epoch(), EventRing(1).epoch());
}

// What one subscription received.
struct Received {
  std::mutex mu;
  std::map<std::string, std::vector<uint64_t>> sequences;  // per worker
  std::map<std::string, std::vector<std::string>> payloads;
  std::vector<EventGap> gaps;
  bool overlap = false;
  int in_handler = 0;

  EventHandlers Handlers() {
    return {[this](const Event& e) {
              std::lock_guard<std::mutex> lock(mu);
              sequences[e.worker_id].push_back(e.sequence);
              payloads[e.worker_id].push_back(e.payload);
            },
            [this](const EventGap& g) {
              std::lock_guard<std::mutex> lock(mu);
              gaps.push_back(g);
            }};
  }
  size_t Count(const std::string& worker) {
    std::lock_guard<std::mutex> lock(mu);
    return sequences[worker].size();
  }
};

// One publishing worker: for the embedded plane a WorkerServer serving its ring, registered in
// discovery; for NATS only the plane.
struct Publisher {
  std::shared_ptr<EventRing> ring;
  std::unique_ptr<WorkerServer> server;
  std::unique_ptr<Lease> lease;
  std::unique_ptr<EventPlane> plane;
};

class EventPlaneTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tandem-events-" + std::to_string(getpid()) + "-" + std::to_string(FreePort()));
    discovery_ = MakeFileDiscovery({root_.string(), 3000ms, 1000ms});
    if (GetParam() == "nats") {
#ifndef TANDEM_HAVE_NATS
      GTEST_SKIP() << "built without libnats";
#endif
      TANDEM_START_OR_SKIP(nats_);
      url_ = nats_.url();
    }
  }
  void TearDown() override {
    publishers_.clear();
    discovery_.reset();
    fs::remove_all(root_);
  }
  EventPlaneOptions Options(const std::string& worker_id = "") {
    EventPlaneOptions o;
    o.url = url_;
    o.worker_id = worker_id;
    o.discovery = discovery_;
    o.namespace_name = "ns";
    o.components = {"decode"};
    o.discovery_interval = 50ms;
    o.timeout = 1000ms;
    return o;
  }
  Publisher& AddPublisher(const std::string& id, size_t ring_capacity = 4096) {
    auto p = std::make_unique<Publisher>();
    EventPlaneOptions o = Options(id);
    if (GetParam() == "embedded") {
      p->ring = std::make_shared<EventRing>(ring_capacity);
      WorkerServerOptions so{"127.0.0.1", 0};
      so.events = p->ring;
      auto engine = std::make_shared<EchoEngineClient>(nullptr, ServedModelInfo{"echo", 100, 50});
      p->server = std::make_unique<WorkerServer>(engine, so);
      EXPECT_TRUE(p->server->Start().ok());
      InstanceInfo info;
      info.namespace_name = "ns";
      info.component = "decode";
      info.instance_id = id;
      info.endpoint = p->server->endpoint();
      auto lease = discovery_->Register(info);
      EXPECT_TRUE(lease.ok());
      p->lease = std::move(*lease);
      o.ring = p->ring;
    }
    auto plane = MakeEventPlane(o);
    EXPECT_TRUE(plane.ok()) << plane.status().ToString();
    p->plane = std::move(*plane);
    publishers_.push_back(std::move(p));
    return *publishers_.back();
  }
  std::unique_ptr<EventPlane> Subscriber() {
    auto plane = MakeEventPlane(Options());
    EXPECT_TRUE(plane.ok()) << plane.status().ToString();
    return plane.ok() ? std::move(*plane) : nullptr;
  }

  NatsServer nats_;
  std::string url_;  // "" = embedded
  fs::path root_;
  std::shared_ptr<Discovery> discovery_;
  std::vector<std::unique_ptr<Publisher>> publishers_;
};

TEST_P(EventPlaneTest, EveryEventArrivesInOrderPerWorkerWithoutGaps) {
  auto sub_plane = Subscriber();
  ASSERT_TRUE(sub_plane);
  Received got;
  auto sub = sub_plane->Subscribe("ns.kv_events", got.Handlers());
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  Publisher& a = AddPublisher("a");
  Publisher& b = AddPublisher("b");
  std::thread ta([&] {
    for (int i = 1; i <= 200; ++i) ASSERT_EQ(*a.plane->Publish("ns.kv_events", "a" + std::to_string(i)), uint64_t(i));
  });
  std::thread tb([&] {
    for (int i = 1; i <= 200; ++i) ASSERT_TRUE(b.plane->Publish("ns.kv_events", "b" + std::to_string(i)).ok());
  });
  ta.join();
  tb.join();
  ASSERT_TRUE(Eventually([&] { return got.Count("a") == 200 && got.Count("b") == 200; }))
      << got.Count("a") << " " << got.Count("b");
  std::lock_guard<std::mutex> lock(got.mu);
  for (const char* w : {"a", "b"}) {
    for (size_t i = 0; i < 200; ++i) {
      ASSERT_EQ(got.sequences[w][i], i + 1);
      ASSERT_EQ(got.payloads[w][i], w + std::to_string(i + 1));
    }
  }
  EXPECT_TRUE(got.gaps.empty());
  EXPECT_TRUE((*sub)->status().ok()) << (*sub)->status().ToString();
  // Another subject is not delivered here.
  ASSERT_TRUE(a.plane->Publish("ns.load", "x").ok());
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(got.sequences["a"].size(), 200u);
}

TEST_P(EventPlaneTest, ALateSubscriberIsToldWhatItMissed) {
  Publisher& a = AddPublisher("a", /*ring_capacity=*/4);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(a.plane->Publish("ns.kv_events", "old").ok());
  ASSERT_TRUE(a.plane->Flush(2s).ok());  // at the server before anyone subscribes
  auto sub_plane = Subscriber();
  Received got;
  auto sub = sub_plane->Subscribe("ns.kv_events", got.Handlers());
  ASSERT_TRUE(sub.ok());
  ASSERT_TRUE(Eventually([&] { return (*sub)->status().ok(); }));
  if (GetParam() == "embedded") {
    // The ring still holds 7..10: replayed after the gap.
    ASSERT_TRUE(Eventually([&] { return got.Count("a") == 4; }));
  }
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(a.plane->Publish("ns.kv_events", "new").ok());
  const size_t want = GetParam() == "embedded" ? 9 : 5;
  ASSERT_TRUE(Eventually([&] { return got.Count("a") == want; })) << got.Count("a");
  std::lock_guard<std::mutex> lock(got.mu);
  ASSERT_EQ(got.gaps.size(), 1u);
  EXPECT_EQ(got.gaps[0].worker_id, "a");
  EXPECT_EQ(got.gaps[0].expected, 1u);
  EXPECT_EQ(got.gaps[0].received, GetParam() == "embedded" ? 7u : 11u);
  EXPECT_EQ(got.sequences["a"].back(), 15u);
}

TEST_P(EventPlaneTest, ARestartedWorkerShowsAsAGap) {
  auto sub_plane = Subscriber();
  Received got;
  auto sub = sub_plane->Subscribe("ns.kv_events", got.Handlers());
  ASSERT_TRUE(sub.ok());
  {
    Publisher& a = AddPublisher("a");
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(a.plane->Publish("ns.kv_events", "x").ok());
    ASSERT_TRUE(Eventually([&] { return got.Count("a") == 3; }));
    publishers_.clear();  // the worker goes away
  }
  Publisher& again = AddPublisher("a");  // and comes back with the same id, counting from 1
  ASSERT_TRUE(again.plane->Publish("ns.kv_events", "y").ok());
  ASSERT_TRUE(Eventually([&] { return got.Count("a") == 4; }));
  std::lock_guard<std::mutex> lock(got.mu);
  ASSERT_EQ(got.gaps.size(), 1u);
  EXPECT_EQ(got.gaps[0].expected, 4u);
  EXPECT_EQ(got.gaps[0].received, 1u);
}

TEST_P(EventPlaneTest, TheServerGoingAwayIsAClearErrorNotAHang) {
  Publisher& a = AddPublisher("a");
  auto sub_plane = Subscriber();
  Received got;
  auto sub = sub_plane->Subscribe("ns.kv_events", got.Handlers());
  ASSERT_TRUE(sub.ok());
  ASSERT_TRUE(Eventually([&] { return (*sub)->status().ok(); }));
  ASSERT_TRUE(a.plane->Publish("ns.kv_events", "1").ok());
  ASSERT_TRUE(Eventually([&] { return got.Count("a") == 1; }));
  std::string where;
  if (GetParam() == "nats") {
    nats_.Kill();
    where = "127.0.0.1:" + std::to_string(nats_.port());
    ASSERT_TRUE(Eventually([&] { return !a.plane->Publish("ns.kv_events", "lost").ok(); }, 5s));
    auto failed = a.plane->Publish("ns.kv_events", "lost");
    EXPECT_NE(failed.status().message().find(where), std::string::npos) << failed.status().message();
  } else {
    where = a.server->endpoint();
    a.server->Stop(100);  // the worker's gRPC server goes; it is still in discovery
  }
  ASSERT_TRUE(Eventually([&] { return !(*sub)->status().ok(); }, 5s));
  EXPECT_NE((*sub)->status().message().find(where), std::string::npos)
      << (*sub)->status().message();
  const auto start = std::chrono::steady_clock::now();
  sub->reset();  // no hang
  sub_plane.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST_P(EventPlaneTest, BadSubjectsAreRefused) {
  Publisher& a = AddPublisher("a");
  EXPECT_EQ(a.plane->Publish("has space", "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.plane->Publish("wild.*", "x").status().code(), StatusCode::kInvalidArgument);
  auto sub_plane = Subscriber();
  EXPECT_EQ(sub_plane->Subscribe("", Received().Handlers()).status().code(),
            StatusCode::kInvalidArgument);
  // A plane without a worker id cannot publish.
  EXPECT_EQ(sub_plane->Publish("ns.kv_events", "x").status().code(),
            StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Planes, EventPlaneTest, ::testing::Values("embedded", "nats"),
                         [](const auto& info) { return info.param; });

TEST(NatsEventPlane, AfterTheServerReturnsTheLossShowsAsAGap) {
#ifndef TANDEM_HAVE_NATS
  GTEST_SKIP() << "built without libnats";
#endif
  NatsServer nats;
  TANDEM_START_OR_SKIP(nats);
  EventPlaneOptions o;
  o.url = nats.url();
  o.worker_id = "w";
  o.timeout = 1000ms;
  auto pub = MakeEventPlane(o);
  o.worker_id.clear();
  auto sub_plane = MakeEventPlane(o);
  ASSERT_TRUE(pub.ok() && sub_plane.ok());
  Received got;
  auto sub = (*sub_plane)->Subscribe("ns.kv_events", got.Handlers());
  ASSERT_TRUE(sub.ok());
  ASSERT_TRUE((*pub)->Publish("ns.kv_events", "1").ok());
  ASSERT_TRUE(Eventually([&] { return got.Count("w") == 1; }));
  ASSERT_EQ(nats.Restart(), "");
  // Until the client reconnects, publishing fails (and spends sequence numbers); until the
  // subscriber's connection is back too, what is published is lost (no subscriber yet).
  ASSERT_TRUE(Eventually([&] {
    (void)(*pub)->Publish("ns.kv_events", "n");
    return got.Count("w") >= 2;
  }, 15s));
  std::lock_guard<std::mutex> lock(got.mu);
  ASSERT_EQ(got.gaps.size(), 1u);
  EXPECT_EQ(got.gaps[0].expected, 2u);
  EXPECT_GT(got.gaps[0].received, 2u);
}

TEST(NatsEventPlane, UnreachableServerIsAClearError) {
#ifndef TANDEM_HAVE_NATS
  GTEST_SKIP() << "built without libnats";
#endif
  EventPlaneOptions o;
  const int port = FreePort();
  o.url = "nats://127.0.0.1:" + std::to_string(port);
  o.timeout = 1000ms;
  const auto start = std::chrono::steady_clock::now();
  auto plane = MakeEventPlane(o);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  ASSERT_FALSE(plane.ok());
  EXPECT_NE(plane.status().message().find(o.url), std::string::npos) << plane.status().message();
  EXPECT_EQ(ValidateEventPlaneUrl("kafka://x").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateEventPlaneUrl("embedded").ok());
}

// A plane's destruction waits for libnats' last callback of its connection, so none runs once the
// plane is gone: the disconnected callback of the close used to log from libnats' thread later,
// at process exit into the logger's destruction (TSan reported it in this suite).
TEST(NatsEventPlane, NoCallbackOfItsConnectionRunsAfterThePlaneIsGone) {
#ifndef TANDEM_HAVE_NATS
  GTEST_SKIP() << "built without libnats";
#endif
  NatsServer nats;
  TANDEM_START_OR_SKIP(nats);
  auto captured = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256);
  spdlog::default_logger()->sinks().push_back(captured);
  struct Unhook {
    std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink;
    ~Unhook() {
      auto& sinks = spdlog::default_logger()->sinks();
      sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
    }
  } unhook{captured};
  auto disconnects = [&] {
    int n = 0;
    for (const auto& m : captured->last_raw()) {
      n += std::string_view(m.payload.data(), m.payload.size()).find("NATS disconnected") != std::string_view::npos;
    }
    return n;
  };
  EventPlaneOptions o;
  o.url = nats.url();
  o.timeout = 1000ms;
  for (int round = 0; round < 10; ++round) {
    auto plane = MakeEventPlane(o);
    ASSERT_TRUE(plane.ok()) << plane.status().ToString();
    plane->reset();
    const int at_return = disconnects();
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(disconnects(), at_return) << "round " << round;
  }
}

TEST(EventSnapshot, FetchedFromTheWorkerOrAClearError) {
  auto engine = std::make_shared<EchoEngineClient>(nullptr, ServedModelInfo{"echo", 100, 50});
  WorkerServerOptions so{"127.0.0.1", 0};
  so.snapshot = [](const std::string& subject) -> Result<EventSnapshot> {
    if (subject != "ns.kv_events") return Status(StatusCode::kNotFound, "no such subject");
    return EventSnapshot{"w", 7, "state"};
  };
  WorkerServer with(engine, so);
  ASSERT_TRUE(with.Start().ok());
  auto snap = FetchSnapshot(with.endpoint(), "ns.kv_events", 2s);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  EXPECT_EQ(snap->worker_id, "w");
  EXPECT_EQ(snap->sequence, 7u);
  EXPECT_EQ(snap->payload, "state");
  EXPECT_FALSE(FetchSnapshot(with.endpoint(), "ns.other", 2s).ok());
  WorkerServer without(engine, WorkerServerOptions{"127.0.0.1", 0});
  ASSERT_TRUE(without.Start().ok());
  auto none = FetchSnapshot(without.endpoint(), "ns.kv_events", 2s);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find(without.endpoint()), std::string::npos);
  const std::string nowhere = "127.0.0.1:" + std::to_string(FreePort());
  auto unreachable = FetchSnapshot(nowhere, "ns.kv_events", 1s);
  ASSERT_FALSE(unreachable.ok());
  EXPECT_NE(unreachable.status().message().find(nowhere), std::string::npos);
}

}  // namespace
}  // namespace tandem::runtime
