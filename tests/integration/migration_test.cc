// Request migration and worker join/leave (issue 8), with processes on 127.0.0.1: a frontend and
// agg workers (CPU, the bundled tiny model), found through the embedded file discovery or through
// a real etcd with the event plane on a real nats-server (the test parameter; without etcd /
// nats-server installed those cases skip, cluster_servers.h).
//   - --migration-limit 1: SIGKILL of the worker serving a 300-token greedy stream mid-way; the
//     stream completes, with the text of the same request served uninterrupted, and the frontend
//     counts one migration.
//   - --migration-limit 0: the same kill ends the stream with an error event; the requests sent
//     right after it (before the next Health poll) are served by the other worker.
//   - --migration-limit 1 with a chat request whose tool call is forced (tool_choice named, a
//     400-character string argument): the worker is killed mid-call, the grammar resumes on the
//     other worker, and the streamed call equals the uninterrupted one.
//   - join/leave: after a SIGKILL the next requests all succeed (they avoid the dead worker); a
//     worker started later gets some of the following requests within seconds (its own /metrics:
//     prefix cache queries > 0).
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

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
using testing::StreamText;

enum class Backend { kEmbedded, kEtcdNats };

class MigrationTest : public ::testing::TestWithParam<Backend> {
 protected:
  struct Worker {
    std::string name;
    int metrics_port = 0;
    std::unique_ptr<ChildProcess> process;
  };

  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : name) c = c == '/' ? '-' : c;
    dir_ = fs::temp_directory_path() /
           ("tandem-migration-it-" + std::to_string(getpid()) + "-" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "discovery");
    if (GetParam() == Backend::kEtcdNats) {
      if (std::string why = etcd_.Start(); !why.empty()) {
        if (runtime::testing::RequireServers()) FAIL() << why;
        GTEST_SKIP() << why;
      }
      if (std::string why = nats_.Start(); !why.empty()) {
        if (runtime::testing::RequireServers()) FAIL() << why;
        GTEST_SKIP() << why;
      }
      cluster_flags_ = {"--discovery", etcd_.url(), "--event-plane", nats_.url()};
    }
  }

  void TearDown() override {
    for (auto& c : curls_) c.reset();
    frontend_.reset();
    if (HasFailure()) std::cerr << Logs();
    workers_.clear();
    fs::remove_all(dir_);
  }

  std::vector<std::pair<std::string, std::string>> Env() const {
    return {{"TANDEM_DISCOVERY_DIR", (dir_ / "discovery").string()}};
  }

  void StartFrontend(int migration_limit) {
    port_ = testing::FreePort();
    base_ = "http://127.0.0.1:" + std::to_string(port_);
    std::vector<std::string> args = {TANDEM_BINARY, "frontend", "--port", std::to_string(port_),
                                     "--namespace", "it", "--request-timeout-s", "120",
                                     "--migration-limit", std::to_string(migration_limit)};
    args.insert(args.end(), cluster_flags_.begin(), cluster_flags_.end());
    frontend_ = ChildProcess::Start(args, Env(), (dir_ / "frontend.log").string());
    ASSERT_TRUE(frontend_);
    ASSERT_TRUE(Eventually([&] { return LiveWorkers() == 0; }, 30s)) << Logs();
  }

  // Starts agg worker `name` and waits until the frontend lists it as live.
  void StartWorker(const std::string& name) {
    Worker w;
    w.name = name;
    w.metrics_port = testing::FreePort();
    std::vector<std::string> args = {TANDEM_BINARY, "worker", "--mode", "agg", "--namespace",
                                     "it", "--port", "0", "--device", "cpu", "--instance-id", name,
                                     "--metrics-port", std::to_string(w.metrics_port),
                                     "--num-kv-blocks", "512"};
    args.insert(args.end(), cluster_flags_.begin(), cluster_flags_.end());
    w.process = ChildProcess::Start(args, Env(), (dir_ / (name + ".log")).string());
    ASSERT_TRUE(w.process);
    workers_.push_back(std::move(w));
    ++live_;
    ASSERT_TRUE(Eventually([&] { return LiveWorkers() == live_; }, 120s)) << Logs();
  }

  std::string Logs() const {
    std::string out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().extension() != ".log") continue;
      out += "---- " + e.path().filename().string() + "\n" + ReadText(e.path());
    }
    return out;
  }

  HttpResult Get(const std::string& url) { return Curl(ShellQuote(url), 5); }
  HttpResult Post(const nlohmann::json& body, int timeout_s = 120) {
    return Curl("-N -H 'content-type: application/json' -d " + ShellQuote(body.dump()) + " " +
                    ShellQuote(base_ + "/v1/completions"),
                timeout_s);
  }
  double FrontendMetric(const std::string& name) {
    HttpResult m = Get(base_ + "/metrics");
    return m.status == 200 ? MetricValue(m.body, name) : -1;
  }
  int LiveWorkers() { return static_cast<int>(FrontendMetric("tandem_workers")); }
  double WorkerMetric(const Worker& w, const std::string& name) {
    HttpResult m = Get("http://127.0.0.1:" + std::to_string(w.metrics_port) + "/metrics");
    return m.status == 200 ? MetricValue(m.body, name) : -1;
  }
  // The worker with a running request (its own /metrics), or null.
  Worker* Serving() {
    for (auto& w : workers_) {
      if (w.process && w.process->Running() && WorkerMetric(w, "tandem_num_requests_running") > 0)
        return &w;
    }
    return nullptr;
  }

  static nlohmann::json LongGreedy() {
    return {{"prompt", "The jury said that the city"}, {"max_tokens", 300},
            {"ignore_eos", true}, {"temperature", 0}};
  }
  void StartStream(const std::string& name, nlohmann::json body, const std::string& path = "/v1/completions") {
    body["stream"] = true;
    curls_.push_back(ChildProcess::Start(
        {"curl", "-sN", "-m", "180", "-o", (dir_ / (name + ".out")).string(), "-w", "%{http_code}",
         "-H", "content-type: application/json", "-d", body.dump(), base_ + path},
        {}, (dir_ / (name + ".code")).string()));
    ASSERT_TRUE(curls_.back());
  }
  std::string Read(const std::string& name) { return ReadText(dir_ / name); }
  static int NumEvents(const std::string& sse) {
    int n = 0;
    for (size_t p = sse.find("data: "); p != std::string::npos; p = sse.find("data: ", p + 1)) ++n;
    return n;
  }

  // Streams LongGreedy(), SIGKILLs its worker after some tokens; returns the killed worker's name.
  std::string StreamAndKillItsWorker() {
    StartStream("s", LongGreedy());
    // Some tokens streamed, the stream not finished.
    EXPECT_TRUE(Eventually([&] { return NumEvents(Read("s.out")) >= 20; }, 60s)) << Logs();
    Worker* serving = nullptr;
    EXPECT_TRUE(Eventually([&] { return (serving = Serving()) != nullptr; }, 10s));
    if (!serving) return "";
    EXPECT_EQ(Read("s.out").find("[DONE]"), std::string::npos) << "finished before the kill";
    killed_at_events_ = NumEvents(Read("s.out"));
    serving->process->Signal(SIGKILL);
    --live_;
    EXPECT_TRUE(serving->process->WaitExit(5s));
    return serving->name;
  }

  EtcdServer etcd_;
  NatsServer nats_;
  std::vector<std::string> cluster_flags_;
  fs::path dir_;
  int port_ = 0;
  std::string base_;
  std::unique_ptr<ChildProcess> frontend_;
  std::vector<Worker> workers_;
  std::vector<std::unique_ptr<ChildProcess>> curls_;
  int killed_at_events_ = 0;
  int live_ = 0;  // workers started and not killed
};

TEST_P(MigrationTest, AStreamWhoseWorkerIsKilledContinuesOnAnotherWorker) {
  StartFrontend(/*migration_limit=*/1);
  StartWorker("w0");
  StartWorker("w1");
  // The reference: the same request served uninterrupted.
  HttpResult ref = Post(LongGreedy());
  ASSERT_EQ(ref.status, 200) << ref.body;
  const auto ref_json = nlohmann::json::parse(ref.body);
  const std::string want = ref_json["choices"][0]["text"];
  ASSERT_EQ(ref_json["usage"]["completion_tokens"], 300);

  const std::string killed = StreamAndKillItsWorker();
  ASSERT_FALSE(killed.empty()) << Logs();
  ASSERT_TRUE(curls_.back()->WaitExit(120s)) << Logs();
  const std::string sse = Read("s.out");
  EXPECT_EQ(Read("s.code"), "200");
  int errors = 0;
  bool done = false;
  const std::string got = StreamText(sse, false, &errors, &done);
  EXPECT_EQ(errors, 0) << sse.substr(sse.size() > 2000 ? sse.size() - 2000 : 0);
  EXPECT_TRUE(done);
  EXPECT_EQ(got, want) << "killed " << killed << " after " << killed_at_events_ << " events";
  EXPECT_NE(sse.find("\"finish_reason\":\"length\""), std::string::npos);
  EXPECT_EQ(FrontendMetric("tandem_request_migrations_total"), 1);
  const std::string log = Read("frontend.log");
  EXPECT_NE(log.find("migrating request"), std::string::npos) << log;
  EXPECT_NE(log.find("(attempt 1 of 1)"), std::string::npos) << log;
  EXPECT_NE(log.find(killed), std::string::npos) << log;
}

TEST_P(MigrationTest, WithoutMigrationTheKillEndsTheStreamWithAnErrorAndServingGoesOn) {
  StartFrontend(/*migration_limit=*/0);
  StartWorker("w0");
  StartWorker("w1");
  const std::string killed = StreamAndKillItsWorker();
  ASSERT_FALSE(killed.empty()) << Logs();
  ASSERT_TRUE(curls_.back()->WaitExit(30s)) << Logs();
  const std::string sse = Read("s.out");
  int errors = 0;
  bool done = false;
  StreamText(sse, false, &errors, &done);
  EXPECT_EQ(errors, 1) << sse.substr(sse.size() > 2000 ? sse.size() - 2000 : 0);
  // The error says a worker went away, without naming it or its address (the log does, below).
  EXPECT_NE(sse.find("worker serving your request went away"), std::string::npos) << sse;
  EXPECT_EQ(sse.find("127.0.0.1"), std::string::npos) << sse;
  EXPECT_EQ(sse.find(killed), std::string::npos) << sse;
  EXPECT_EQ(FrontendMetric("tandem_request_migrations_total"), 0);
  // The failed stream (UNAVAILABLE) marked the worker unhealthy before its error event went out:
  // the next requests, sent at once (before the next Health poll), all go to the other worker.
  EXPECT_NE(Read("frontend.log").find("worker " + killed), std::string::npos);
  EXPECT_NE(Read("frontend.log").find("is unreachable"), std::string::npos) << Read("frontend.log");
  for (int i = 0; i < 4; ++i) {
    HttpResult r = Post({{"prompt", "Hello " + std::to_string(i)}, {"max_tokens", 4}});
    EXPECT_EQ(r.status, 200) << r.body;
  }
  EXPECT_TRUE(Eventually([&] { return LiveWorkers() == live_; }, 10s)) << Logs();
}

TEST_P(MigrationTest, NewRequestsAvoidAKilledWorkerAndAJoiningWorkerGetsTraffic) {
  StartFrontend(/*migration_limit=*/0);
  StartWorker("w0");
  StartWorker("w1");
  workers_[0].process->Signal(SIGKILL);
  --live_;
  ASSERT_TRUE(workers_[0].process->WaitExit(5s));
  // Within a few seconds (Health polls every 0.5 s) no request goes to the dead worker.
  ASSERT_TRUE(Eventually([&] { return LiveWorkers() == 1; }, 10s)) << Logs();
  for (int i = 0; i < 6; ++i) {
    HttpResult r = Post({{"prompt", "Leave " + std::to_string(i)}, {"max_tokens", 4}});
    EXPECT_EQ(r.status, 200) << r.body;
  }

  const auto joined = std::chrono::steady_clock::now();
  StartWorker("w2");  // returns when the frontend lists it
  EXPECT_LT(std::chrono::steady_clock::now() - joined, 120s);
  const Worker& fresh = workers_.back();
  ASSERT_EQ(WorkerMetric(fresh, "tandem_prefix_cache_queries_total"), 0);
  // Distinct prompts, several at a time: the new worker gets some of them.
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 4; ++i) {
      StartStream("j" + std::to_string(round) + std::to_string(i),
                  {{"prompt", "Join round " + std::to_string(round) + " request " +
                                  std::to_string(i) + " about the county"},
                   {"max_tokens", 16}});
    }
    for (auto& c : curls_) EXPECT_TRUE(c->WaitExit(60s));
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(Read("j" + std::to_string(round) + std::to_string(i) + ".code"), "200");
    }
  }
  EXPECT_GT(WorkerMetric(fresh, "tandem_prefix_cache_queries_total"), 0)
      << "the joining worker got none of 12 requests";
}

TEST_P(MigrationTest, AForcedToolCallContinuesOnAnotherWorker) {
  StartFrontend(/*migration_limit=*/1);
  StartWorker("w0");
  StartWorker("w1");
  const nlohmann::json body = {
      {"messages", {{{"role", "user"}, {"content", "Write it down."}}}},
      {"tools", {{{"type", "function"}, {"function", {{"name", "note"}, {"parameters", {
          {"type", "object"}, {"additionalProperties", false}, {"required", {"text"}},
          {"properties", {{"text", {{"type", "string"}, {"minLength", 400}, {"maxLength", 400}}}}}}}}}}}},
      {"tool_choice", {{"type", "function"}, {"function", {{"name", "note"}}}}},
      {"temperature", 0}, {"max_tokens", 1000}};
  HttpResult ref = Curl("-H 'content-type: application/json' -d " + ShellQuote(body.dump()) + " " +
                            ShellQuote(base_ + "/v1/chat/completions"), 120);
  ASSERT_EQ(ref.status, 200) << ref.body;
  const auto ref_json = nlohmann::json::parse(ref.body);
  ASSERT_EQ(ref_json["choices"][0]["finish_reason"], "tool_calls") << ref.body;
  const std::string want = ref_json["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"];

  StartStream("t", body, "/v1/chat/completions");
  Worker* serving = nullptr;
  ASSERT_TRUE(Eventually([&] { return (serving = Serving()) != nullptr; }, 30s)) << Logs();
  std::this_thread::sleep_for(100ms);  // some of the call generated
  ASSERT_EQ(Read("t.out").find("[DONE]"), std::string::npos) << "finished before the kill";
  serving->process->Signal(SIGKILL);
  --live_;
  ASSERT_TRUE(serving->process->WaitExit(5s));
  ASSERT_TRUE(curls_.back()->WaitExit(120s)) << Logs();
  EXPECT_EQ(Read("t.code"), "200");
  const std::string sse = Read("t.out");
  std::string args, finish;
  for (size_t p = sse.find("data: {"); p != std::string::npos; p = sse.find("data: {", p + 1)) {
    auto e = nlohmann::json::parse(sse.substr(p + 6, sse.find("\n\n", p) - p - 6));
    ASSERT_FALSE(e.contains("error")) << e.dump();
    const auto& c = e["choices"][0];
    if (c["delta"].contains("tool_calls")) args += c["delta"]["tool_calls"][0]["function"]["arguments"].get<std::string>();
    if (c["finish_reason"].is_string()) finish = c["finish_reason"];
  }
  EXPECT_EQ(args, want);
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(FrontendMetric("tandem_request_migrations_total"), 1);
}

INSTANTIATE_TEST_SUITE_P(Discovery, MigrationTest,
                         ::testing::Values(Backend::kEmbedded, Backend::kEtcdNats),
                         [](const ::testing::TestParamInfo<Backend>& p) {
                           return p.param == Backend::kEmbedded ? "Embedded" : "EtcdNats";
                         });

}  // namespace
}  // namespace tandem
