// RemotePrefillClient and the frontend router's prefill worker choice (the prefill_worker_id hint,
// DESIGN.md section 1): three prefill workers over real gRPC on 127.0.0.1, each a WorkerServer with
// a fake RemotePrefillHandler that answers with its own number as the first token; a private file
// discovery. A live hint is used every time; an unknown hint, a worker serving another model and
// a worker that left discovery are passed over for round-robin, which the hints do not disturb.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <thread>

#include <gtest/gtest.h>

#include "discovery/file_discovery.h"
#include "engine/echo_engine.h"
#include "rpc/remote_prefill_client.h"
#include "rpc/worker_server.h"

namespace tandem::runtime {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Answers every prefill at once with first_token_id = `number` (nothing is written).
class NumberedHandler final : public RemotePrefillHandler {
 public:
  explicit NumberedHandler(int number) : number_(number) {}
  void Prefill(RemotePrefillRequest request, RemotePrefillDone done) override {
    RemotePrefillResult r;
    r.first_token_id = number_;
    done(r);
  }
  void Cancel(const std::string&) override {}

 private:
  int number_;
};

struct FakePrefillWorker {
  std::shared_ptr<EchoEngineClient> engine;
  std::unique_ptr<WorkerServer> server;
  std::unique_ptr<Lease> lease;
};

class RemotePrefillHintTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tandem-prefill-hint-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    discovery_ = MakeFileDiscovery({root_.string(), 3000ms, 1000ms});
    // p0 and p1 serve "tiny"; p2 serves "other".
    for (int i = 0; i < 3; ++i) Start(i, i == 2 ? "other" : "tiny");
    RemotePrefillClientOptions o;
    o.namespace_name = "hint";
    o.served_model_name = "tiny";
    o.refresh_interval = 50ms;
    client_ = std::make_unique<RemotePrefillClient>(discovery_, o);
    ASSERT_TRUE(WaitFor([&] { return client_->num_workers() == 2; }));
  }
  void TearDown() override {
    client_.reset();
    for (auto& [i, w] : workers_) {
      w.lease.reset();
      if (w.server) w.server->Stop(200);
    }
    workers_.clear();
    fs::remove_all(root_);
  }

  void Start(int i, const std::string& model) {
    FakePrefillWorker& w = workers_[i];
    w.engine = std::make_shared<EchoEngineClient>(nullptr, ServedModelInfo{model, 1000, 50});
    WorkerServerOptions so{"127.0.0.1", 0};
    so.remote_prefill = std::make_shared<NumberedHandler>(i);
    w.server = std::make_unique<WorkerServer>(w.engine, so);
    ASSERT_TRUE(w.server->Start().ok());
    InstanceInfo info;
    info.namespace_name = "hint";
    info.component = kComponentPrefill;
    info.instance_id = "p" + std::to_string(i);
    info.endpoint = w.server->endpoint();
    info.metadata = {{"model", model}};
    auto lease = discovery_->Register(info);
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    w.lease = std::move(lease).value();
  }

  template <typename F>
  static bool WaitFor(F f, std::chrono::milliseconds timeout = 10s) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (f()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return f();
  }

  struct Answer {
    std::string worker;  // the client's choice
    int number = -1;     // who answered (the first token); -1 on an error
  };
  Answer Prefill(const std::string& hint) {
    RemotePrefillRequest r;
    r.request_id = "r" + std::to_string(++num_requests_);
    r.prompt_token_ids = {1, 2, 3};
    r.params.max_tokens = 1;
    auto promise = std::make_shared<std::promise<int>>();
    Answer a;
    client_->Prefill(
        r, 5s,
        [promise](Result<RemotePrefillResult> result) {
          promise->set_value(result.ok() ? result->first_token_id : -1);
        },
        &a.worker, hint);
    auto f = promise->get_future();
    EXPECT_EQ(f.wait_for(10s), std::future_status::ready);
    a.number = f.get();
    return a;
  }

  fs::path root_;
  std::shared_ptr<Discovery> discovery_;
  std::map<int, FakePrefillWorker> workers_;
  std::unique_ptr<RemotePrefillClient> client_;
  int num_requests_ = 0;
};

TEST_F(RemotePrefillHintTest, ALiveHintIsUsedEveryTime) {
  for (int i = 0; i < 4; ++i) {
    Answer a = Prefill("p1");
    EXPECT_EQ(a.worker, "p1");
    EXPECT_EQ(a.number, 1);
    a = Prefill("p0");
    EXPECT_EQ(a.worker, "p0");
    EXPECT_EQ(a.number, 0);
  }
  EXPECT_TRUE(client_->HasWorker("p0"));
  EXPECT_TRUE(client_->HasWorker("p1"));
}

TEST_F(RemotePrefillHintTest, NoHintOrAnUnknownOneIsRoundRobinAndHintsDoNotMoveIt) {
  // Workers in instance id order: p0, p1, p0, ... Hints in between do not advance the position.
  EXPECT_EQ(Prefill("").number, 0);
  EXPECT_EQ(Prefill("p0").number, 0);
  EXPECT_EQ(Prefill("p0").number, 0);
  EXPECT_EQ(Prefill("").number, 1);
  EXPECT_EQ(Prefill("nobody").number, 0);
  EXPECT_EQ(Prefill("nobody").number, 1);
  EXPECT_FALSE(client_->HasWorker("nobody"));
}

TEST_F(RemotePrefillHintTest, AWorkerServingAnotherModelIsPassedOver) {
  EXPECT_FALSE(client_->HasWorker("p2"));
  for (int i = 0; i < 4; ++i) {
    Answer a = Prefill("p2");
    EXPECT_NE(a.number, 2);
    EXPECT_EQ(a.number, i % 2) << "round-robin over p0, p1";
    EXPECT_EQ(a.worker, "p" + std::to_string(i % 2));
  }
}

TEST_F(RemotePrefillHintTest, AWorkerThatLeftDiscoveryIsPassedOver) {
  EXPECT_EQ(Prefill("p1").number, 1);
  workers_[1].lease.reset();  // leaves discovery
  ASSERT_TRUE(WaitFor([&] { return !client_->HasWorker("p1"); }));
  workers_[1].server->Stop(200);
  for (int i = 0; i < 3; ++i) {
    Answer a = Prefill("p1");
    EXPECT_EQ(a.worker, "p0");
    EXPECT_EQ(a.number, 0);
  }
  // Back under the same id: used again.
  workers_.erase(1);
  Start(1, "tiny");
  ASSERT_TRUE(WaitFor([&] { return client_->HasWorker("p1"); }));
  EXPECT_EQ(Prefill("p1").number, 1);
}

}  // namespace
}  // namespace tandem::runtime
