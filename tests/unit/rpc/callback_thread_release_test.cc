// Issue 21 ("assertion failed: prior > 0" in ref_counted.h, or a SIGSEGV in gRPC's nexting_thread):
// gRPC 1.51 runs the callbacks of every callback-API call of the process on the threads of one
// shared completion queue; the destructor of the channel or server that was that queue's last user
// shuts it down, joins its threads and deletes it, so dropping that last reference on one of those
// threads makes the thread join itself and then poll a deleted queue. A client must therefore never
// drop a channel (nor its own state, which holds the channels) inside a gRPC callback. These tests
// stall gRPC's thread at the very end of a call's OnDone (the test hook) and check that the client's
// state is released by the thread that destroys the client, even when the worker's server (the
// queue's other user) is gone before the stalled thread goes on.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "discovery/file_discovery.h"
#include "engine/echo_engine.h"
#include "rpc/remote_engine_client.h"
#include "rpc/remote_engine_client_impl.h"
#include "rpc/remote_prefill_client.h"
#include "rpc/worker_server.h"

namespace tandem::runtime {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Records the thread that destroys it (the client's state holds it through on_workers_changed).
struct Probe {
  std::mutex* mu;
  std::thread::id* destroyed_on;
  bool* destroyed;
  ~Probe() {
    std::lock_guard<std::mutex> lock(*mu);
    *destroyed_on = std::this_thread::get_id();
    *destroyed = true;
  }
};

// The threads of gRPC's shared callback queue alive now (threads named "nexting_thread").
int NextingThreads() {
  int n = 0;
  for (const auto& task : fs::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    n += name == "nexting_thread";
  }
  return n;
}

std::atomic<int> g_hook_calls{0};
std::atomic<int> g_hook_exits{0};

void StallAfterCallEnded() {
  ++g_hook_calls;
  std::this_thread::sleep_for(300ms);
  ++g_hook_exits;
}

class CallbackThreadReleaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tandem-release-test-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    discovery_ = MakeFileDiscovery({root_.string(), 3000ms, 1000ms});
  }
  // A worker (the echo engine behind it) registered as `component`.
  void StartWorker(const std::string& component, std::shared_ptr<RemotePrefillHandler> prefill = nullptr) {
    engine_ = std::make_shared<EchoEngineClient>(nullptr, ServedModelInfo{"echo", 1000, 50}, 1ms);
    WorkerServerOptions so{"127.0.0.1", 0};
    so.remote_prefill = std::move(prefill);
    server_ = std::make_unique<WorkerServer>(engine_, so);
    ASSERT_TRUE(server_->Start().ok());
    InstanceInfo info;
    info.namespace_name = "test";
    info.component = component;
    info.endpoint = server_->endpoint();
    info.metadata = {{"model", "echo"}, {"max_model_len", 1000}, {"vocab_size", 50}};
    auto lease = discovery_->Register(info);
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    lease_ = std::move(lease).value();
  }
  void TearDown() override {
    remote_detail::after_call_ended_for_testing.store(nullptr);
    lease_.reset();
    if (server_) server_->Stop(0);
    server_.reset();
    engine_.reset();
    fs::remove_all(root_);
  }

  fs::path root_;
  std::shared_ptr<Discovery> discovery_;
  std::shared_ptr<EchoEngineClient> engine_;
  std::unique_ptr<WorkerServer> server_;
  std::unique_ptr<Lease> lease_;
};

TEST_F(CallbackThreadReleaseTest, TheClientsStateIsReleasedByTheThreadThatDestroysIt) {
  std::mutex mu;
  std::thread::id destroyed_on;
  bool destroyed = false;
  StartWorker(kComponentAgg);
  std::unique_ptr<RemoteEngineClient> client;
  {
    RemoteEngineClientOptions o;
    o.namespace_name = "test";
    o.refresh_interval = 50ms;
    std::shared_ptr<Probe> probe(new Probe{&mu, &destroyed_on, &destroyed});
    o.on_workers_changed = [probe](int) {};
    probe.reset();
    client = std::make_unique<RemoteEngineClient>(discovery_, std::move(o));
  }
  client->Refresh();
  ASSERT_EQ(client->Workers().size(), 1u);

  g_hook_calls = 0;
  g_hook_exits = 0;
  remote_detail::after_call_ended_for_testing.store(&StallAfterCallEnded);
  std::mutex out_mu;
  std::condition_variable out_cv;
  bool finished = false;
  GenerateRequest r;
  r.request_id = "r";
  r.prompt_token_ids = {3, 4, 5};
  r.params.max_tokens = 4;
  ASSERT_TRUE(client
                  ->Submit(r,
                           [&](RequestOutput out) {
                             std::lock_guard<std::mutex> lock(out_mu);
                             finished = finished || out.finished;
                             out_cv.notify_all();
                           })
                  .ok());
  {
    std::unique_lock<std::mutex> lock(out_mu);
    ASSERT_TRUE(out_cv.wait_for(lock, 10s, [&] { return finished; }));
  }
  // The final output came before the call's OnDone; the destructor waits for the call, whose
  // thread then stalls in the hook.
  client.reset();
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(destroyed) << "the client's state outlived its destructor (held by gRPC's thread)";
    if (destroyed) EXPECT_EQ(destroyed_on, std::this_thread::get_id());
  }
  // The worker's server goes while gRPC's thread is stalled: whatever that thread still held would
  // now be the shared queue's last user.
  lease_.reset();
  server_->Stop(0);
  server_.reset();
  for (int i = 0; i < 200 && g_hook_exits.load() < g_hook_calls.load(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(g_hook_calls.load(), 1);
  EXPECT_EQ(g_hook_exits.load(), g_hook_calls.load());
  remote_detail::after_call_ended_for_testing.store(nullptr);
  for (int i = 0; i < 100; ++i) {  // (with the defect, the stalled thread releases it now)
    std::this_thread::sleep_for(10ms);
    std::lock_guard<std::mutex> lock(mu);
    if (destroyed) break;
  }
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_TRUE(destroyed);
  EXPECT_EQ(destroyed_on, std::this_thread::get_id()) << "released on gRPC's callback thread";
}

// Holds each prefill until the test answers it.
class HeldPrefill final : public RemotePrefillHandler {
 public:
  void Prefill(RemotePrefillRequest, RemotePrefillDone done) override {
    std::lock_guard<std::mutex> lock(mu);
    held = std::move(done);
    cv.notify_all();
  }
  void Cancel(const std::string&) override {}
  bool Answer() {
    RemotePrefillDone done;
    {
      std::unique_lock<std::mutex> lock(mu);
      if (!cv.wait_for(lock, 10s, [&] { return held != nullptr; })) return false;
      done = std::move(held);
    }
    RemotePrefillResult r;
    r.first_token_id = 7;
    done(r);
    return true;
  }

  std::mutex mu;
  std::condition_variable cv;
  RemotePrefillDone held;
};

// A prefill call whose worker left discovery while it ran: when it ends, nothing on gRPC's thread
// may hold the last reference to that worker's channel. Here the worker's server is gone by then
// (the caller's `done` waits for it), so that channel is the shared queue's last user and, dropped
// on gRPC's thread (the call's callback owning it), took that thread down.
TEST_F(CallbackThreadReleaseTest, APrefillCallWhoseWorkerLeftEndsWithoutItsChannelOnGrpcsThread) {
  const bool queue_unused = NextingThreads() == 0;  // no other test's channel or server holds it
  auto handler = std::make_shared<HeldPrefill>();
  StartWorker(kComponentPrefill, handler);
  RemotePrefillClientOptions o;
  o.namespace_name = "test";
  o.refresh_interval = 20ms;
  auto client = std::make_unique<RemotePrefillClient>(discovery_, o);
  ASSERT_EQ(client->num_workers(), 1);

  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, server_gone = false, answered = false;
  RemotePrefillRequest req;
  req.request_id = "p";
  req.prompt_token_ids = {1, 2, 3};
  client->Prefill(req, 10s, [&](Result<RemotePrefillResult> result) {
    std::unique_lock<std::mutex> lock(mu);
    answered = result.ok() && result->first_token_id == 7;
    entered = true;
    cv.notify_all();
    cv.wait_for(lock, 10s, [&] { return server_gone; });
  });
  lease_.reset();  // the worker leaves discovery; the client forgets it while the call runs
  for (int i = 0; i < 500 && client->num_workers() != 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(client->num_workers(), 0);
  ASSERT_TRUE(handler->Answer());
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return entered; }));
  }
  server_->Stop(0);
  server_.reset();
  engine_.reset();
  {
    std::lock_guard<std::mutex> lock(mu);
    server_gone = true;
    cv.notify_all();
  }
  std::this_thread::sleep_for(200ms);  // the callback ends; its thread polls for the next one
  client.reset();
  // The channel was the queue's last user: its release shut the queue down and joined its threads,
  // all of them unless it ran on one (which then outlives its deleted queue, when it does not crash).
  if (queue_unused) EXPECT_EQ(NextingThreads(), 0) << "the channel was released on gRPC's thread";
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_TRUE(answered);
}

}  // namespace
}  // namespace tandem::runtime
