// Issue 21: a request that finds no live worker waits a bounded time for one
// (RemoteEngineClientOptions::wait_for_worker) instead of failing at once, and so does a migration
// whose pool is empty. WorkerServer + RemoteEngineClient (+ MigratingEngineClient) in one process
// over real gRPC on 127.0.0.1, the echo engine behind the worker, a private discovery directory.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "discovery/file_discovery.h"
#include "engine/echo_engine.h"
#include "rpc/migrating_engine_client.h"
#include "rpc/remote_engine_client.h"
#include "rpc/worker_server.h"

namespace tandem::runtime {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<RequestOutput> outputs;
  int num_finished = 0;
  Clock::time_point finished_at;

  OutputCallback Callback() {
    return [this](RequestOutput out) {
      std::lock_guard<std::mutex> lock(mu);
      if (out.finished && ++num_finished == 1) finished_at = Clock::now();
      outputs.push_back(std::move(out));
      cv.notify_all();
    };
  }
  bool WaitFinished(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [this] { return num_finished > 0; });
  }
  bool WaitOutputs(size_t n, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [&] { return outputs.size() >= n || num_finished > 0; });
  }
  RequestOutput Last() {
    std::lock_guard<std::mutex> lock(mu);
    return outputs.back();
  }
  size_t NumTokens() {
    std::lock_guard<std::mutex> lock(mu);
    size_t n = 0;
    for (const auto& o : outputs) n += o.new_token_ids.size();
    return n;
  }
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

class WaitForWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tandem-wait-test-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    discovery_ = MakeFileDiscovery({root_.string(), 3000ms, 1000ms});
  }
  void TearDown() override {
    migrating_.reset();
    client_.reset();
    StopWorker();
    fs::remove_all(root_);
  }

  void StartWorker(std::chrono::microseconds token_delay = 2ms) {
    engine_ = std::make_shared<EchoEngineClient>(nullptr, ServedModelInfo{"echo", 1000, 50}, token_delay);
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
  void StopWorker() {
    lease_.reset();
    if (server_) server_->Stop(0);
    server_.reset();
    engine_.reset();
  }
  void StartClient(std::chrono::milliseconds wait, std::chrono::milliseconds timeout = 60s) {
    RemoteEngineClientOptions o;
    o.namespace_name = "test";
    o.request_timeout = timeout;
    o.refresh_interval = 500ms;  // the production default: the wait polls faster by itself
    o.wait_for_worker = wait;
    client_ = std::make_shared<RemoteEngineClient>(discovery_, o);
    client_->Refresh();
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
  std::shared_ptr<RemoteEngineClient> client_;
  std::shared_ptr<MigratingEngineClient> migrating_;
};

TEST_F(WaitForWorkerTest, ARequestWithNoWorkerIsServedByOneThatJoinsWithinTheWait) {
  StartClient(5s);
  Collector c;
  const auto start = Clock::now();
  ASSERT_TRUE(client_->Submit(Request("early", 4), c.Callback()).ok());
  EXPECT_EQ(client_->Stats().num_pending, 1);
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(c.num_finished, 0) << "ended before the wait was over: " << c.Last().error;
  StartWorker();
  ASSERT_TRUE(c.WaitFinished(10s));
  const RequestOutput last = c.Last();
  EXPECT_EQ(last.finish_reason, FinishReason::kLength) << last.error;
  EXPECT_EQ(c.NumTokens(), 4u);
  // Sent within a poll or two of the worker's registration, well before the wait's end.
  EXPECT_LT(Seconds(c.finished_at - start), 4.0);
}

TEST_F(WaitForWorkerTest, WithNoWorkerTheRequestFailsWhenTheWaitEndsNotBefore) {
  StartClient(1500ms);
  Collector c;
  const auto start = Clock::now();
  ASSERT_TRUE(client_->Submit(Request("none", 4), c.Callback()).ok());
  ASSERT_TRUE(c.WaitFinished(6s));
  const double waited = Seconds(c.finished_at - start);
  EXPECT_GE(waited, 1.4);
  EXPECT_LT(waited, 2.5);
  const RequestOutput last = c.Last();
  EXPECT_TRUE(IsNoWorkerOutput(last)) << last.error;
  EXPECT_NE(last.refusal.message().find("no worker available"), std::string::npos) << last.refusal.ToString();
  EXPECT_EQ(client_->Stats().num_pending, 0);
}

TEST_F(WaitForWorkerTest, TheRequestTimeoutBoundsTheWait) {
  StartClient(10s, /*timeout=*/600ms);
  Collector c;
  const auto start = Clock::now();
  ASSERT_TRUE(client_->Submit(Request("short", 4), c.Callback()).ok());
  ASSERT_TRUE(c.WaitFinished(5s));
  EXPECT_LT(Seconds(c.finished_at - start), 1.5);
  EXPECT_TRUE(IsNoWorkerOutput(c.Last()));
}

TEST_F(WaitForWorkerTest, CancelEndsAWaitingRequestAndDuplicatesAreRefused) {
  StartClient(10s);
  Collector c, dup;
  ASSERT_TRUE(client_->Submit(Request("w", 4), c.Callback()).ok());
  EXPECT_EQ(client_->Submit(Request("w", 4), dup.Callback()).code(), StatusCode::kInvalidArgument);
  const auto start = Clock::now();
  client_->Cancel("w");
  ASSERT_TRUE(c.WaitFinished(2s));
  EXPECT_LT(Seconds(c.finished_at - start), 1.0);
  EXPECT_EQ(c.Last().finish_reason, FinishReason::kAbort);
}

TEST_F(WaitForWorkerTest, NoWaitFailsAtOnce) {
  StartClient(0ms);
  Collector c;
  EXPECT_EQ(client_->Submit(Request("now", 4), c.Callback()).code(), StatusCode::kFailedPrecondition);
}

TEST_F(WaitForWorkerTest, TheDestructorEndsWaitingRequests) {
  StartClient(30s);
  Collector c;
  ASSERT_TRUE(client_->Submit(Request("left", 4), c.Callback()).ok());
  const auto start = Clock::now();
  client_.reset();
  ASSERT_TRUE(c.WaitFinished(2s));
  EXPECT_LT(Seconds(Clock::now() - start), 2.0);
  EXPECT_EQ(c.Last().finish_reason, FinishReason::kAbort);
}

// A rolling restart of a one-worker pool: the request's worker goes away mid-stream, its
// migration waits, the restarted worker finishes it.
TEST_F(WaitForWorkerTest, AMigrationWaitsForTheRestartedWorker) {
  StartWorker(20ms);
  StartClient(5s);
  MigratingEngineClientOptions mo;
  mo.migration_limit = 1;
  std::weak_ptr<RemoteEngineClient> weak = client_;
  mo.before_retry = [weak] {
    if (auto c = weak.lock()) c->Refresh();
  };
  migrating_ = std::make_shared<MigratingEngineClient>(client_, mo);
  Collector c;
  ASSERT_TRUE(migrating_->Submit(Request("m", 60), c.Callback()).ok());
  ASSERT_TRUE(c.WaitOutputs(3));
  StopWorker();
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(c.num_finished, 0) << c.Last().error;
  StartWorker(2ms);
  ASSERT_TRUE(c.WaitFinished(10s));
  EXPECT_EQ(c.Last().finish_reason, FinishReason::kLength) << c.Last().error;
  EXPECT_EQ(c.NumTokens(), 60u);
  EXPECT_EQ(migrating_->num_migrations(), 1u);
}

// The same with no worker coming back: the lost worker's error, after about the wait.
TEST_F(WaitForWorkerTest, AMigrationWithNoWorkerFailsAfterTheWaitWithTheLostWorkersError) {
  StartWorker(20ms);
  StartClient(1500ms);
  MigratingEngineClientOptions mo;
  mo.migration_limit = 1;
  std::weak_ptr<RemoteEngineClient> weak = client_;
  mo.before_retry = [weak] {  // as the frontend does
    if (auto c = weak.lock()) c->Refresh();
  };
  migrating_ = std::make_shared<MigratingEngineClient>(client_, mo);
  Collector c;
  ASSERT_TRUE(migrating_->Submit(Request("m", 1000), c.Callback()).ok());
  ASSERT_TRUE(c.WaitOutputs(3));
  const auto stopped = Clock::now();
  StopWorker();
  ASSERT_TRUE(c.WaitFinished(8s));
  const double waited = Seconds(c.finished_at - stopped);
  EXPECT_GE(waited, 1.3);
  EXPECT_LT(waited, 4.0);
  const RequestOutput last = c.Last();
  EXPECT_EQ(last.finish_reason, FinishReason::kError);
  EXPECT_TRUE(last.worker_lost) << "not the lost worker's error: " << last.error;
  EXPECT_TRUE(last.refusal.ok()) << last.refusal.ToString();
  EXPECT_NE(last.error.find("migration to another worker failed: no worker available"), std::string::npos)
      << last.error;
}

}  // namespace
}  // namespace tandem::runtime
