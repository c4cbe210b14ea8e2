// tandem serve GRAPH.yaml and tandem run (1 prefill + 1 decode) as real process trees on
// 127.0.0.1, each test with a private discovery directory (TANDEM_DISCOVERY_DIR) and a free port:
//   - an aggregated graph: /health 200, golden greedy text through the frontend; kill -9 of the
//     worker -> the supervisor restarts it and requests succeed again; SIGTERM -> every child is
//     gone, serve exits 0, discovery is empty;
//   - kill -9 of serve itself: its children die with it (PR_SET_PDEATHSIG), no orphans;
//   - a component that cannot start (a bad flag: exit 2) -> serve stops the rest and exits 1;
//     a bad graph -> exit 2 naming the line;
//   - 1 prefill + 1 decode (every prompt prefilled remotely), and `tandem run` with no --mode:
//     golden text, a killed prefill worker restarted, clean stop. Skipped only while
//     `tandem worker --mode prefill` answers "not available yet" (exit 2).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "process_util.h"
#include "http_util.h"
#include "subprocess.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::Eventually;
using testing::RunCommand;
using testing::ShellQuote;
using testing::Curl;
using testing::HttpResult;
using testing::MetricValue;
using testing::ReadText;
using testing::GoldenDir;
using testing::StreamText;
using testing::Alive;
using testing::ChildrenOf;
using testing::PidOf;

class ServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tandem-serve-it-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "discovery");
    port_ = testing::FreePort();
    ASSERT_GT(port_, 0);
    base_ = "http://127.0.0.1:" + std::to_string(port_);
  }
  void TearDown() override {
    serve_.reset();  // SIGKILL: its children follow (PR_SET_PDEATHSIG)
    if (HasFailure()) std::cerr << "---- serve.log\n" << ReadText(dir_ / "serve.log");
    fs::remove_all(dir_);
  }

  std::vector<std::pair<std::string, std::string>> Env() const {
    return {{"TANDEM_DISCOVERY_DIR", (dir_ / "discovery").string()}};
  }

  // Workers' restart backoff short, so that a restart is quick.
  std::string WriteGraph(const std::string& workers) {
    const fs::path path = dir_ / "graph.yaml";
    std::ofstream(path) << "name: it\nnamespace: it\nfrontend: {port: 8000, request_timeout_s: 60}\n"
                        << "workers:\n" << workers
                        << "restart: {max_restarts: 3, backoff_ms: 100}\n"
                        << "startup_timeout_s: 120\nshutdown_grace_s: 5\n";
    return path.string();
  }

  // Starts `tandem <args>` and waits for /health 200 (false if serve exits first or 150 s pass).
  bool Start(std::vector<std::string> args) {
    args.insert(args.begin(), TANDEM_BINARY);
    serve_ = ChildProcess::Start(args, Env(), (dir_ / "serve.log").string());
    if (!serve_) return false;
    return Eventually([&] { return !serve_->Running() || Get("/health").status == 200; }, 150s) &&
           serve_->Running() && Get("/health").status == 200;
  }

  HttpResult Get(const std::string& path) { return Curl(ShellQuote(base_ + path), 5); }
  HttpResult Post(const std::string& path, const nlohmann::json& body) {
    return Curl("-H 'content-type: application/json' -d " + ShellQuote(body.dump()) + " " +
                    ShellQuote(base_ + path),
                120);
  }

  // Every golden case (chat and raw prompts) through the frontend, greedy, not streamed; the
  // first `max_cases` only when given. Returns how many matched.
  int CheckGolden(int max_cases = 100) {
    auto golden = ReadJsonFile(GoldenDir() + "/tiny-qwen3.json");
    EXPECT_TRUE(golden.ok()) << golden.status().ToString();
    if (!golden.ok()) return 0;
    int matched = 0, checked = 0;
    for (const auto& c : (*golden)["generation"]) {
      if (checked++ == max_cases) break;
      const bool chat = c["chat"].get<bool>();
      nlohmann::json body = {{"temperature", 0}, {"max_tokens", c["greedy_ids"].size()}};
      if (chat) {
        const auto& m = c["messages"];
        body["messages"] =
            m.is_string() ? nlohmann::json::array({{{"role", "user"}, {"content", m}}}) : m;
        body["chat_template_kwargs"] = {{"enable_thinking", false}};
      } else {
        body["prompt"] = c["prompt"];
      }
      SCOPED_TRACE(body.dump());
      HttpResult r = Post(chat ? "/v1/chat/completions" : "/v1/completions", body);
      EXPECT_EQ(r.status, 200) << r.body;
      if (r.status != 200) continue;
      const auto j = nlohmann::json::parse(r.body, nullptr, false);
      const auto& choice = j["choices"][0];
      const std::string got = chat ? choice["message"]["content"] : choice["text"];
      EXPECT_EQ(got, c["greedy_text"].get<std::string>());
      matched += got == c["greedy_text"].get<std::string>();
    }
    return matched;
  }

  // kill -9 of the child with `role`; true once another process has that role and the graph
  // serves the first golden case again.
  bool KillAndAwaitRestart(const std::string& role) {
    const pid_t victim = PidOf(ChildrenOf(serve_->pid()), role);
    EXPECT_GT(victim, 0) << role;
    if (victim <= 0) return false;
    kill(victim, SIGKILL);
    const bool replaced = Eventually([&] {
      const pid_t now = PidOf(ChildrenOf(serve_->pid()), role);
      return now > 0 && now != victim;
    }, 30s);
    EXPECT_TRUE(replaced) << role;
    EXPECT_TRUE(Eventually([&] { return Get("/health").status == 200; }, 90s));
    // Requests succeed again (a request racing the restart may fail; the next must not).
    EXPECT_TRUE(Eventually([&] {
      return Post("/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 3}}).status == 200;
    }, 60s));
    EXPECT_EQ(CheckGolden(2), 2);
    return replaced;
  }

  // SIGTERM to serve: exit 0 within 15 s, every child it had gone, nothing left in discovery.
  void StopAndCheckClean() {
    const auto children = ChildrenOf(serve_->pid());
    EXPECT_GE(children.size(), 2u);
    const auto t0 = std::chrono::steady_clock::now();
    serve_->Signal(SIGTERM);
    ASSERT_TRUE(serve_->WaitExit(15s));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
    EXPECT_TRUE(WIFEXITED(serve_->exit_status()) && WEXITSTATUS(serve_->exit_status()) == 0)
        << "wait status " << serve_->exit_status();
    for (const auto& [pid, role] : children) EXPECT_FALSE(Alive(pid)) << role << " pid " << pid;
    int leftover = 0;
    for (const auto& e : fs::recursive_directory_iterator(dir_ / "discovery")) {
      leftover += e.path().extension() == ".json";
    }
    EXPECT_EQ(leftover, 0);
    EXPECT_NE(ReadText(dir_ / "serve.log").find("every component stopped"), std::string::npos);
  }

  // Skips the test while prefill workers do not exist yet (the worker exits 2 saying so).
  bool PrefillUnavailable() {
    auto r = RunCommand("env TANDEM_DISCOVERY_DIR=" + ShellQuote((dir_ / "probe").string()) + " " +
                            std::string(TANDEM_BINARY) +
                            " worker --mode prefill --namespace probe --port 0 --num-kv-blocks 64",
                        5);
    return r.exit_code == 2 && r.err.find("not available") != std::string::npos;
  }

  fs::path dir_;
  int port_ = 0;
  std::string base_;
  std::unique_ptr<ChildProcess> serve_;
};

TEST_F(ServeTest, AggGraphServesGoldenRestartsAKilledWorkerAndStopsCleanly) {
  const std::string graph = WriteGraph("  - {mode: agg, replicas: 1, device: cpu}\n");
  ASSERT_TRUE(Start({"serve", graph, "--port", std::to_string(port_)}));
  const auto children = ChildrenOf(serve_->pid());
  ASSERT_EQ(children.size(), 2u);
  EXPECT_GT(PidOf(children, "agg"), 0);
  EXPECT_GT(PidOf(children, "frontend"), 0);
  EXPECT_EQ(CheckGolden(), 8);

  ASSERT_TRUE(KillAndAwaitRestart("agg"));
  const std::string log = ReadText(dir_ / "serve.log");
  EXPECT_NE(log.find("agg-0: signal 9 (KILL)"), std::string::npos) << log;
  EXPECT_NE(log.find("[agg-0] "), std::string::npos);     // prefixed child output
  EXPECT_NE(log.find("[frontend] "), std::string::npos);

  // The frontend is supervised too.
  ASSERT_TRUE(KillAndAwaitRestart("frontend"));
  StopAndCheckClean();
}

TEST_F(ServeTest, KillingServeTakesItsChildrenWithIt) {
  const std::string graph = WriteGraph("  - {mode: agg}\n");
  ASSERT_TRUE(Start({"serve", graph, "--port", std::to_string(port_)}));
  const auto children = ChildrenOf(serve_->pid());
  ASSERT_EQ(children.size(), 2u);
  serve_->Signal(SIGKILL);
  ASSERT_TRUE(serve_->WaitExit(5s));
  for (const auto& [pid, role] : children) {
    EXPECT_TRUE(Eventually([pid = pid] { return !Alive(pid); }, 5s)) << role;
  }
}

TEST_F(ServeTest, AComponentThatCannotStartStopsTheGraphWithExit1) {
  const std::string graph =
      WriteGraph("  - {mode: agg}\n  - {mode: agg, args: [--no-such-flag]}\n");
  serve_ = ChildProcess::Start({TANDEM_BINARY, "serve", graph, "--port", std::to_string(port_)},
                               Env(), (dir_ / "serve.log").string());
  ASSERT_TRUE(serve_);
  ASSERT_TRUE(serve_->WaitExit(60s));
  EXPECT_TRUE(WIFEXITED(serve_->exit_status()) && WEXITSTATUS(serve_->exit_status()) == 1);
  const std::string log = ReadText(dir_ / "serve.log");
  EXPECT_NE(log.find("agg-1 cannot start (exit 2"), std::string::npos) << log;
  EXPECT_NE(log.find("[agg-1] "), std::string::npos) << log;  // the worker's own complaint
}

TEST_F(ServeTest, ABadGraphExits2NamingTheLine) {
  const fs::path path = dir_ / "bad.yaml";
  std::ofstream(path) << "frontend: {port: 1}\nworkers:\n  - mode: agg\n    replicas: 0\n";
  auto r = RunCommand(std::string(TANDEM_BINARY) + " serve " + ShellQuote(path.string()), 30);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bad.yaml:4: 'replicas' must be in [1, 1024] (got 0)"), std::string::npos)
      << r.err;
  // --dry-run prints the commands of a good graph and starts nothing.
  auto dry = RunCommand(std::string(TANDEM_BINARY) + " serve " +
                        ShellQuote(std::string(TANDEM_SOURCE_DIR) + "/deploy/disagg-2p2d.yaml") +
                        " --dry-run --port 9999", 30);
  EXPECT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_NE(dry.out.find("tandem worker --mode prefill"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("--instance-id disagg-2p2d-decode-1"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("tandem frontend --host 127.0.0.1 --port 9999"), std::string::npos);
}

TEST_F(ServeTest, OnePrefillOneDecodeServesGoldenAndSurvivesAKilledPrefillWorker) {
  if (PrefillUnavailable()) GTEST_SKIP() << "tandem worker --mode prefill is not available yet";
  // max_local_prefill_tokens 0: every prompt is prefilled by the prefill worker.
  const std::string graph = WriteGraph(
      "  - {mode: prefill, replicas: 1, device: cpu}\n"
      "  - {mode: decode, replicas: 1, device: cpu, max_local_prefill_tokens: 0}\n");
  ASSERT_TRUE(Start({"serve", graph, "--port", std::to_string(port_)}));
  const auto children = ChildrenOf(serve_->pid());
  ASSERT_EQ(children.size(), 3u);
  EXPECT_GT(PidOf(children, "prefill"), 0);
  EXPECT_GT(PidOf(children, "decode"), 0);
  EXPECT_EQ(CheckGolden(), 8);
  // The prompts crossed as KV blocks (the decode worker's periodic log, DESIGN.md section 4).
  static const std::regex transfers("Num successful transfers=[1-9]");
  EXPECT_TRUE(Eventually([&] {
    return std::regex_search(ReadText(dir_ / "serve.log"), transfers);
  }, 20s));
  ASSERT_TRUE(KillAndAwaitRestart("prefill"));
  ASSERT_TRUE(KillAndAwaitRestart("decode"));
  StopAndCheckClean();
}

TEST_F(ServeTest, RunDefaultsToOnePrefillAndOneDecode) {
  if (PrefillUnavailable()) GTEST_SKIP() << "tandem worker --mode prefill is not available yet";
  ASSERT_TRUE(Start({"run", "--port", std::to_string(port_), "--num-kv-blocks", "512"}));
  const auto children = ChildrenOf(serve_->pid());
  ASSERT_EQ(children.size(), 3u);
  EXPECT_GT(PidOf(children, "prefill"), 0);
  EXPECT_GT(PidOf(children, "decode"), 0);
  EXPECT_GT(PidOf(children, "frontend"), 0);
  EXPECT_EQ(CheckGolden(), 8);
  StopAndCheckClean();
}

}  // namespace
}  // namespace tandem
