// KV-aware routing end to end (issue 8): tandem frontend (--router-mode kv) + two tandem worker
// --mode agg processes (CPU, the bundled tiny model) on 127.0.0.1, with the embedded event plane
// and file discovery, then with etcd + NATS (real servers on free loopback ports; skipped when not
// installed):
//   - requests sharing a long prefix all land on the worker that cached it (the workers' own
//     /metrics: only its prefix-cache queries grow, and mostly as hits);
//   - the frontend's /metrics shows the router's decisions and its index per worker;
//   - after SIGKILL of that worker its blocks leave the router's index and requests still succeed.
#include <csignal>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../unit/discovery/cluster_servers.h"
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
using testing::HttpResult;
using testing::MetricValue;
using testing::ReadText;
using testing::ShellQuote;

class KvRoutingIt : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tandem-kvrouting-it-" + std::to_string(getpid()) + "-" + GetParam());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "discovery");
    if (GetParam() == "etcd_nats") {
      TANDEM_START_OR_SKIP(etcd_);
      TANDEM_START_OR_SKIP(nats_);
      cluster_ = {"--discovery", etcd_.url(), "--event-plane", nats_.url()};
    }
    port_ = testing::FreePort();
    base_ = "http://127.0.0.1:" + std::to_string(port_);
    std::vector<std::string> args = {TANDEM_BINARY, "frontend", "--port", std::to_string(port_),
                                     "--namespace", "kvit", "--router-mode", "kv",
                                     "--request-timeout-s", "60"};
    args.insert(args.end(), cluster_.begin(), cluster_.end());
    frontend_ = ChildProcess::Start(args, Env(), (dir_ / "frontend.log").string());
    ASSERT_TRUE(frontend_);
    for (const char* id : {"kv-a", "kv-b"}) {
      const int mport = testing::FreePort();
      metrics_port_[id] = mport;
      std::vector<std::string> w = {TANDEM_BINARY, "worker", "--mode", "agg", "--namespace", "kvit",
                                    "--instance-id", id, "--port", "0", "--device", "cpu",
                                    "--num-kv-blocks", "256", "--metrics-port",
                                    std::to_string(mport)};
      w.insert(w.end(), cluster_.begin(), cluster_.end());
      workers_[id] = ChildProcess::Start(w, Env(), (dir_ / (std::string(id) + ".log")).string());
      ASSERT_TRUE(workers_[id]);
    }
    ASSERT_TRUE(Eventually([&] { return FrontendMetric("tandem_workers") == 2; }, 120s)) << Logs();
  }
  void TearDown() override {
    frontend_.reset();
    workers_.clear();
    if (HasFailure()) std::cerr << Logs();
    fs::remove_all(dir_);
  }
  std::vector<std::pair<std::string, std::string>> Env() const {
    return {{"TANDEM_DISCOVERY_DIR", (dir_ / "discovery").string()}};
  }
  std::string Logs() const {
    std::string out;
    for (const char* name : {"frontend.log", "kv-a.log", "kv-b.log"}) {
      out += std::string("---- ") + name + "\n" + ReadText(dir_ / name);
    }
    return out;
  }
  double FrontendMetric(const std::string& series) {
    HttpResult m = Curl(ShellQuote(base_ + "/metrics"), 5);
    return m.status == 200 ? MetricValue(m.body, series) : -1;
  }
  double WorkerMetric(const std::string& id, const std::string& series) {
    HttpResult m =
        Curl(ShellQuote("http://127.0.0.1:" + std::to_string(metrics_port_[id]) + "/metrics"), 5);
    return m.status == 200 ? MetricValue(m.body, series) : -1;
  }
  HttpResult Complete(const std::string& prompt) {
    const nlohmann::json body = {{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}};
    return Curl("-H 'content-type: application/json' -d " + ShellQuote(body.dump()) + " " +
                    ShellQuote(base_ + "/v1/completions"),
                60);
  }
  static std::string Prefix() {
    std::string p;
    for (int i = 0; i < 12; ++i) {
      p += "The quick brown fox number " + std::to_string(i) + " jumps over the lazy dog. ";
    }
    return p;
  }
  static std::string Cached(const std::string& id) {
    return "tandem_router_worker_cached_blocks{worker=\"" + id + "\"}";
  }

  EtcdServer etcd_;
  NatsServer nats_;
  std::vector<std::string> cluster_;
  fs::path dir_;
  int port_ = 0;
  std::string base_;
  std::map<std::string, int> metrics_port_;
  std::unique_ptr<ChildProcess> frontend_;
  std::map<std::string, std::unique_ptr<ChildProcess>> workers_;
};

TEST_P(KvRoutingIt, SharedPrefixRequestsGoToTheHolderAndAKilledWorkersBlocksLeaveTheIndex) {
  EXPECT_NE(ReadText(dir_ / "frontend.log")
                .find("router: kv (overlap weight 1, temperature 0), KV events from " +
                      (GetParam() == "embedded" ? std::string("embedded") : nats_.url())),
            std::string::npos)
      << ReadText(dir_ / "frontend.log");
  const std::string queries = "tandem_prefix_cache_queries_total";
  const std::string hits = "tandem_prefix_cache_hits_total";
  const double a0 = WorkerMetric("kv-a", queries), b0 = WorkerMetric("kv-b", queries);
  ASSERT_GE(a0, 0);
  ASSERT_GE(b0, 0);
  HttpResult first = Complete(Prefix() + "First question?");
  ASSERT_EQ(first.status, 200) << first.body;
  const bool a_holds = WorkerMetric("kv-a", queries) > a0;
  const std::string holder = a_holds ? "kv-a" : "kv-b", other = a_holds ? "kv-b" : "kv-a";
  ASSERT_GT(WorkerMetric(holder, queries), a_holds ? a0 : b0);
  // The holder's blocks reach the router (its KV events).
  ASSERT_TRUE(Eventually([&] { return FrontendMetric(Cached(holder)) >= 8; }, 20s))
      << FrontendMetric(Cached(holder));
  const double holder_q = WorkerMetric(holder, queries), holder_h = WorkerMetric(holder, hits);
  const double other_q = WorkerMetric(other, queries);
  for (int i = 0; i < 5; ++i) {
    HttpResult r = Complete(Prefix() + "Question " + std::to_string(i) + " is different?");
    ASSERT_EQ(r.status, 200) << r.body;
  }
  EXPECT_EQ(WorkerMetric(other, queries), other_q) << "a shared-prefix request went to " << other;
  const double q = WorkerMetric(holder, queries) - holder_q, h = WorkerMetric(holder, hits) - holder_h;
  EXPECT_GT(q, 0);
  EXPECT_GT(h, 0.7 * q) << "hits " << h << " of " << q << " prompt tokens";
  EXPECT_EQ(FrontendMetric("tandem_router_decisions_total{mode=\"kv\"}"), 6);

  // SIGKILL the holder: once it left discovery its blocks leave the router's index.
  const double indexed = FrontendMetric("tandem_router_indexed_blocks");
  ASSERT_GE(indexed, 8);
  workers_[holder]->Signal(SIGKILL);
  ASSERT_TRUE(workers_[holder]->WaitExit(5s));
  ASSERT_TRUE(Eventually([&] { return FrontendMetric(Cached(holder)) == 0; }, 30s))
      << FrontendMetric(Cached(holder));
  EXPECT_LT(FrontendMetric("tandem_router_indexed_blocks"), indexed);
  EXPECT_TRUE(Eventually([&] { return FrontendMetric("tandem_workers") == 1; }, 10s));
  for (int i = 0; i < 3; ++i) {
    HttpResult r = Complete(Prefix() + "After the kill " + std::to_string(i));
    EXPECT_EQ(r.status, 200) << r.body;
  }
  EXPECT_GT(WorkerMetric(other, queries), other_q);
}

INSTANTIATE_TEST_SUITE_P(Planes, KvRoutingIt, ::testing::Values("embedded", "etcd_nats"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tandem
