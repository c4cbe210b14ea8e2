// WorkerServer + RemoteEngineClient in one process over real gRPC on 127.0.0.1, with the echo
// engine (no model) behind the worker and a private discovery directory.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "discovery/file_discovery.h"
#include "engine/echo_engine.h"
#include "rpc/remote_engine_client.h"
#include "rpc/worker_server.h"

namespace tandem::runtime {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Collects one request's outputs; Wait() is bounded.
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<RequestOutput> outputs;
  bool done = false;

  OutputCallback Callback() {
    return [this](RequestOutput out) {
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_FALSE(done) << "an output after the final one";
      done = out.finished;
      outputs.push_back(std::move(out));
      cv.notify_all();
    };
  }
  bool WaitFinished(std::chrono::milliseconds timeout = 10s) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [this] { return done; });
  }
  bool WaitOutputs(size_t n, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [&] { return outputs.size() >= n || done; });
  }
  RequestOutput Last() {
    std::lock_guard<std::mutex> lock(mu);
    return outputs.back();
  }
};

template <typename F>
bool Eventually(F f, std::chrono::milliseconds timeout = 10s) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return f();
}

class WorkerRpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tandem-rpc-test-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    discovery_ = MakeFileDiscovery({root_.string(), 3000ms, 1000ms});
  }
  void TearDown() override {
    client_.reset();
    lease_.reset();
    if (server_) server_->Stop(200);
    server_.reset();
    engine_.reset();
    fs::remove_all(root_);
  }

  void StartWorker(std::chrono::microseconds token_delay = 2ms) {
    engine_ = std::make_shared<EchoEngineClient>(nullptr, ServedModelInfo{"echo", 1000, 50},
                                                 token_delay);
    server_ = std::make_unique<WorkerServer>(engine_, WorkerServerOptions{"127.0.0.1", 0});
    ASSERT_TRUE(server_->Start().ok());
    InstanceInfo info;
    info.namespace_name = "test";
    info.component = kComponentAgg;
    info.endpoint = server_->endpoint();
    info.metadata = {{"model", "echo"}, {"max_model_len", 1000}, {"vocab_size", 50}};
    auto lease = discovery_->Register(info);
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    lease_ = std::move(lease).value();
  }
  void StartClient(std::chrono::milliseconds timeout = 60s) {
    RemoteEngineClientOptions o;
    o.namespace_name = "test";
    o.request_timeout = timeout;
    o.refresh_interval = 50ms;
    o.fallback_model_info = {"echo", 7, 0};
    client_ = std::make_unique<RemoteEngineClient>(discovery_, o);
  }
  bool WaitWorkers(size_t n) {
    return Eventually([&] {
      size_t healthy = 0;
      for (const auto& w : client_->Workers()) healthy += w.healthy;
      return healthy == n;
    });
  }
  static GenerateRequest Request(const std::string& id, int max_tokens) {
    GenerateRequest r;
    r.request_id = id;
    r.prompt_token_ids = {3, 4, 5};
    r.params.max_tokens = max_tokens;
    return r;
  }

  fs::path root_;
  std::shared_ptr<Discovery> discovery_;
  std::shared_ptr<EchoEngineClient> engine_;
  std::unique_ptr<WorkerServer> server_;
  std::unique_ptr<Lease> lease_;
  std::unique_ptr<RemoteEngineClient> client_;
};

TEST_F(WorkerRpcTest, NoWorkerIsFailedPreconditionAndModelInfoFallsBack) {
  StartClient();
  client_->Refresh();
  Collector c;
  Status st = client_->Submit(Request("r1", 4), c.Callback());
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("no worker available"), std::string::npos) << st.message();
  EXPECT_EQ(client_->model_info().max_model_len, 7);
}

TEST_F(WorkerRpcTest, StreamsEveryOutputThenOneFinalOne) {
  StartWorker();
  StartClient();
  ASSERT_TRUE(WaitWorkers(1));
  EXPECT_EQ(client_->model_info().max_model_len, 1000);
  EXPECT_EQ(client_->model_info().vocab_size, 50);
  Collector c;
  ASSERT_TRUE(client_->Submit(Request("r1", 7), c.Callback()).ok());
  ASSERT_TRUE(c.WaitFinished());
  std::vector<int32_t> tokens;
  for (const auto& o : c.outputs) {
    EXPECT_EQ(o.request_id, "r1");
    tokens.insert(tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
  }
  EXPECT_EQ(tokens, (std::vector<int32_t>{3, 4, 5, 3, 4, 5, 3}));
  EXPECT_EQ(c.Last().finish_reason, FinishReason::kLength);
  EXPECT_EQ(c.Last().num_output_tokens, 7);
  EXPECT_EQ(client_->Stats().num_pending, 0);
  // A request id may be reused once its request finished.
  Collector again;
  ASSERT_TRUE(client_->Submit(Request("r1", 1), again.Callback()).ok());
  ASSERT_TRUE(again.WaitFinished());
}

TEST_F(WorkerRpcTest, ConcurrentRequestsAndDuplicateIds) {
  StartWorker();
  StartClient();
  ASSERT_TRUE(WaitWorkers(1));
  std::vector<std::unique_ptr<Collector>> cs;
  for (int i = 0; i < 16; ++i) {
    cs.push_back(std::make_unique<Collector>());
    ASSERT_TRUE(client_->Submit(Request("c" + std::to_string(i), 20), cs.back()->Callback()).ok());
  }
  Collector dup;
  EXPECT_EQ(client_->Submit(Request("c0", 20), dup.Callback()).code(),
            StatusCode::kInvalidArgument);
  for (auto& c : cs) {
    ASSERT_TRUE(c->WaitFinished());
    EXPECT_EQ(c->Last().finish_reason, FinishReason::kLength);
    EXPECT_EQ(c->Last().num_output_tokens, 20);
  }
}

TEST_F(WorkerRpcTest, CancelAbortsAndTheWorkerEngineForgetsTheRequest) {
  StartWorker(20ms);
  StartClient();
  ASSERT_TRUE(WaitWorkers(1));
  Collector c;
  ASSERT_TRUE(client_->Submit(Request("long", 100000), c.Callback()).ok());
  ASSERT_TRUE(c.WaitOutputs(2));
  EXPECT_EQ(engine_->Stats().num_pending, 1);
  client_->Cancel("long");
  ASSERT_TRUE(c.WaitFinished());
  EXPECT_EQ(c.Last().finish_reason, FinishReason::kAbort);
  EXPECT_TRUE(Eventually([&] { return engine_->Stats().num_pending == 0; }));
  client_->Cancel("long");     // finished: ignored
  client_->Cancel("unknown");  // ignored
}

TEST_F(WorkerRpcTest, ADeadlineEndsTheRequestWithAnErrorAndCancelsItOnTheWorker) {
  StartWorker(20ms);
  StartClient(300ms);
  ASSERT_TRUE(WaitWorkers(1));
  Collector c;
  ASSERT_TRUE(client_->Submit(Request("slow", 100000), c.Callback()).ok());
  ASSERT_TRUE(c.WaitFinished(5s));
  EXPECT_EQ(c.Last().finish_reason, FinishReason::kError);
  EXPECT_NE(c.Last().error.find("deadline"), std::string::npos) << c.Last().error;
  EXPECT_TRUE(Eventually([&] { return engine_->Stats().num_pending == 0; }));
}

TEST_F(WorkerRpcTest, AWorkerThatGoesAwayMidStreamEndsTheRequestWithAnError) {
  StartWorker(20ms);
  StartClient();
  ASSERT_TRUE(WaitWorkers(1));
  Collector c;
  ASSERT_TRUE(client_->Submit(Request("orphan", 100000), c.Callback()).ok());
  ASSERT_TRUE(c.WaitOutputs(2));
  server_->Stop(0);
  ASSERT_TRUE(c.WaitFinished(5s));
  EXPECT_EQ(c.Last().finish_reason, FinishReason::kError);
  EXPECT_NE(c.Last().error.find("worker"), std::string::npos) << c.Last().error;
  // Still registered but not answering: not used; then gone from discovery.
  lease_.reset();
  EXPECT_TRUE(WaitWorkers(0));
  Collector none;
  EXPECT_EQ(client_->Submit(Request("next", 2), none.Callback()).code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(WorkerRpcTest, StatsComeFromTheWorkersHealthAndWorkersAreUsedInTurn) {
  StartWorker(50ms);
  // A second worker in the same process.
  auto engine2 = std::make_shared<EchoEngineClient>(nullptr, ServedModelInfo{"echo", 1000, 50},
                                                    std::chrono::milliseconds(50));
  WorkerServer server2(engine2, WorkerServerOptions{"127.0.0.1", 0});
  ASSERT_TRUE(server2.Start().ok());
  InstanceInfo info;
  info.namespace_name = "test";
  info.component = kComponentAgg;
  info.endpoint = server2.endpoint();
  info.metadata = {{"model", "echo"}};
  auto lease2 = discovery_->Register(info);
  ASSERT_TRUE(lease2.ok());
  StartClient();
  ASSERT_TRUE(WaitWorkers(2));
  Collector a, b;
  ASSERT_TRUE(client_->Submit(Request("a", 100000), a.Callback()).ok());
  ASSERT_TRUE(client_->Submit(Request("b", 100000), b.Callback()).ok());
  ASSERT_TRUE(a.WaitOutputs(1) && b.WaitOutputs(1));
  EXPECT_EQ(engine_->Stats().num_pending, 1);
  EXPECT_EQ(engine2->Stats().num_pending, 1);
  EXPECT_TRUE(Eventually([&] { return client_->Stats().engine.num_running == 2; }));
  EXPECT_EQ(client_->Stats().num_pending, 2);
  client_.reset();  // cancels both; each gets its final output before the destructor returns
  EXPECT_TRUE(a.done && b.done);
  EXPECT_TRUE(Eventually([&] { return engine2->Stats().num_pending == 0; }));
  server2.Stop(200);
}

}  // namespace
}  // namespace tandem::runtime
