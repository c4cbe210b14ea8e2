// tandem's cluster plumbing with real servers (issue 8): a worker and a frontend as separate
// processes found through etcd (--discovery etcd://) with their event plane on NATS
// (--event-plane nats://); a SIGKILLed worker's key leaves etcd with its lease; an unreachable
// etcd or NATS stops a component at start with a message naming it. etcd and nats-server are
// started on free loopback ports and stopped by the test (tests/unit/discovery/cluster_servers.h);
// without them installed the tests skip.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../unit/discovery/cluster_servers.h"
#include "discovery/etcd_discovery.h"
#include "http_util.h"
#include "process_util.h"
#include "subprocess.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using runtime::testing::EtcdServer;
using runtime::testing::NatsServer;
using testing::ChildProcess;
using testing::Curl;
using testing::Eventually;
using testing::ReadText;
using testing::RunCommand;
using testing::ShellQuote;

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tandem-cluster-it-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    frontend_.reset();
    worker_.reset();
    if (HasFailure()) {
      for (const char* f : {"worker.log", "frontend.log"}) {
        std::cerr << "---- " << f << "\n" << ReadText(dir_ / f);
      }
    }
    fs::remove_all(dir_);
  }
  size_t NumWorkers(runtime::Discovery& d) {
    auto list = d.List("it", "agg");
    return list.ok() ? list->size() : 0;
  }

  fs::path dir_;
  std::unique_ptr<ChildProcess> worker_, frontend_;
};

TEST_F(ClusterTest, WorkerAndFrontendOnEtcdAndNatsServeAndAKilledWorkerLeavesEtcd) {
  EtcdServer etcd;
  TANDEM_START_OR_SKIP(etcd);
  NatsServer nats;
  TANDEM_START_OR_SKIP(nats);
  auto discovery = runtime::MakeDiscovery(etcd.url());
  ASSERT_TRUE(discovery.ok()) << discovery.status().ToString();

  worker_ = ChildProcess::Start({TANDEM_BINARY, "worker", "--mode", "agg", "--namespace", "it",
                                 "--discovery", etcd.url(), "--event-plane", nats.url(),
                                 "--num-kv-blocks", "128", "--port", "0"},
                                {}, (dir_ / "worker.log").string());
  ASSERT_TRUE(Eventually([&] { return NumWorkers(**discovery) == 1 || !worker_->Running(); }, 120s));
  ASSERT_EQ(NumWorkers(**discovery), 1u);
  // The start-up line follows the registration: wait for it rather than read the log once.
  EXPECT_TRUE(Eventually([&] {
    return ReadText(dir_ / "worker.log").find("event plane " + nats.url()) != std::string::npos;
  }, 10s)) << ReadText(dir_ / "worker.log");

  const int port = testing::FreePort();
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  frontend_ = ChildProcess::Start({TANDEM_BINARY, "frontend", "--namespace", "it", "--port",
                                   std::to_string(port), "--discovery", etcd.url(),
                                   "--event-plane", nats.url()},
                                  {}, (dir_ / "frontend.log").string());
  ASSERT_TRUE(Eventually([&] { return Curl(ShellQuote(base + "/health"), 5).status == 200; }, 60s));
  const nlohmann::json body = {{"prompt", "The jury said"}, {"max_tokens", 4}, {"temperature", 0}};
  auto r = Curl("-H 'content-type: application/json' -d " + ShellQuote(body.dump()) + " " +
                    ShellQuote(base + "/v1/completions"),
                60);
  EXPECT_EQ(r.status, 200) << r.body;

  // SIGKILL: nobody revokes the lease; etcd drops the key when it expires (worker TTL 5 s).
  worker_->Signal(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([&] { return NumWorkers(**discovery) == 0; }, 20s));
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 9s);
  EXPECT_TRUE(Eventually([&] { return Curl(ShellQuote(base + "/health"), 5).status == 503; }, 20s));
}

TEST_F(ClusterTest, AnUnreachableEtcdOrNatsStopsAComponentNamingIt) {
  const int port = testing::FreePort();
  const std::string etcd = "etcd://127.0.0.1:" + std::to_string(port);
  auto r = RunCommand(std::string(TANDEM_BINARY) + " frontend --port 0 --discovery " + etcd, 60);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("etcd at http://127.0.0.1:" + std::to_string(port)), std::string::npos)
      << r.err;
#ifdef TANDEM_HAVE_NATS
  const std::string nats = "nats://127.0.0.1:" + std::to_string(port);
  r = RunCommand(std::string(TANDEM_BINARY) + " frontend --port 0 --event-plane " + nats, 60);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(nats), std::string::npos) << r.err;
#endif
  r = RunCommand(std::string(TANDEM_BINARY) + " frontend --port 0 --discovery consul://x", 60);
  EXPECT_EQ(r.exit_code, 2) << r.err;  // a usage error
}

}  // namespace
}  // namespace tandem
