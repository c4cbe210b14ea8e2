// tandem frontend + tandem worker --mode agg as separate processes on 127.0.0.1, with a private
// discovery directory (TANDEM_DISCOVERY_DIR) per test, driven with curl:
//   - golden greedy text for every golden prompt (chat via /v1/chat/completions, raw via
//     /v1/completions), streamed and not;
//   - a client that disconnects mid-stream: the worker's KV blocks return to the baseline (the
//     frontend's /metrics: tandem_kv_blocks_used is the sum of the workers' Health reports);
//   - kill -9 of the worker: in-flight requests end with an error (HTTP 500 / SSE error event),
//     the worker leaves discovery within 5 s, the frontend answers 503, a restarted worker serves.
#include <cstdlib>
#include <filesystem>
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

class RuntimeAggTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tandem-runtime-it-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "discovery");
    port_ = testing::FreePort();
    ASSERT_GT(port_, 0);
    base_ = "http://127.0.0.1:" + std::to_string(port_);
    frontend_ = ChildProcess::Start(
        {TANDEM_BINARY, "frontend", "--port", std::to_string(port_), "--namespace", "it",
         "--request-timeout-s", "60"},
        Env(), (dir_ / "frontend.log").string());
    ASSERT_TRUE(frontend_);
    // Up, but not ready: no worker yet.
    ASSERT_TRUE(Eventually([&] { return Get("/health").status == 503; }, 30s)) << Logs();
    StartWorker();
  }

  void TearDown() override {
    for (auto& c : curls_) c.reset();
    worker_.reset();
    frontend_.reset();
    if (HasFailure()) std::cerr << Logs();
    fs::remove_all(dir_);
  }

  std::vector<std::pair<std::string, std::string>> Env() const {
    return {{"TANDEM_DISCOVERY_DIR", (dir_ / "discovery").string()}};
  }

  void StartWorker() {
    worker_ = ChildProcess::Start({TANDEM_BINARY, "worker", "--mode", "agg", "--namespace", "it",
                                   "--port", "0", "--device", "cpu"},
                                  Env(), (dir_ / "worker.log").string());
    ASSERT_TRUE(worker_);
    ASSERT_TRUE(Eventually([&] { return Get("/health").status == 200; }, 120s)) << Logs();
  }

  std::string Logs() const {
    std::string out;
    for (const char* name : {"frontend.log", "worker.log"}) {
      std::ifstream in(dir_ / name);
      std::stringstream ss;
      ss << in.rdbuf();
      out += std::string("---- ") + name + "\n" + ss.str();
    }
    return out;
  }

  HttpResult Get(const std::string& path) { return Curl(ShellQuote(base_ + path), 5); }
  HttpResult Post(const std::string& path, const nlohmann::json& body, int timeout_s = 120) {
    return Curl("-N -H 'content-type: application/json' -d " + ShellQuote(body.dump()) + " " +
                    ShellQuote(base_ + path),
                timeout_s);
  }

  // tandem_kv_blocks_used from the frontend's /metrics (-1 when absent).
  double KvBlocksUsed() {
    HttpResult m = Get("/metrics");
    return m.status == 200 ? MetricValue(m.body, "tandem_kv_blocks_used") : -1;
  }

  // A background curl streaming a long generation to a file.
  ChildProcess* StartLongStream(const std::string& name, bool stream) {
    nlohmann::json body = {{"prompt", "Once upon a time"}, {"max_tokens", 3000},
                           {"ignore_eos", true}, {"stream", stream}, {"temperature", 0}};
    curls_.push_back(ChildProcess::Start(
        {"curl", "-sN", "-m", "120", "-o", (dir_ / (name + ".out")).string(), "-w", "%{http_code}",
         "-H", "content-type: application/json", "-d", body.dump(), base_ + "/v1/completions"},
        {}, (dir_ / (name + ".code")).string()));
    return curls_.back().get();
  }
  std::string Read(const std::string& name) {
    std::ifstream in(dir_ / name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  fs::path dir_;
  int port_ = 0;
  std::string base_;
  std::unique_ptr<ChildProcess> frontend_, worker_;
  std::vector<std::unique_ptr<ChildProcess>> curls_;
};

TEST_F(RuntimeAggTest, GoldenGreedyTextThroughFrontendAndWorkerStreamedAndNot) {
  auto golden = ReadJsonFile(GoldenDir() + "/tiny-qwen3.json");
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();
  int checked = 0;
  for (const auto& c : (*golden)["generation"]) {
    const bool chat = c["chat"].get<bool>();
    nlohmann::json body = {{"temperature", 0}, {"max_tokens", c["greedy_ids"].size()}};
    if (chat) {
      const auto& m = c["messages"];
      body["messages"] = m.is_string()
                             ? nlohmann::json::array({{{"role", "user"}, {"content", m}}})
                             : m;
      body["chat_template_kwargs"] = {{"enable_thinking", false}};
    } else {
      body["prompt"] = c["prompt"];
    }
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    const std::string want = c["greedy_text"].get<std::string>();
    SCOPED_TRACE(body.dump());

    HttpResult r = Post(path, body);
    ASSERT_EQ(r.status, 200) << r.body;
    auto j = nlohmann::json::parse(r.body);
    const auto& choice = j["choices"][0];
    EXPECT_EQ(chat ? choice["message"]["content"] : choice["text"], want);
    EXPECT_EQ(choice["finish_reason"], c["greedy_ids"].size() < 32 ? "stop" : "length");
    EXPECT_EQ(j["usage"]["prompt_tokens"], c["prompt_ids"].size());

    body["stream"] = true;
    HttpResult s = Post(path, body);
    ASSERT_EQ(s.status, 200) << s.body;
    int errors = 0;
    bool done = false;
    EXPECT_EQ(StreamText(s.body, chat, &errors, &done), want);
    EXPECT_EQ(errors, 0);
    EXPECT_TRUE(done);
    ++checked;
  }
  EXPECT_EQ(checked, 8);
  EXPECT_TRUE(Eventually([&] { return KvBlocksUsed() == 0; }, 10s));
}

TEST_F(RuntimeAggTest, AClientThatDisconnectsMidStreamFreesTheWorkersBlocks) {
  ASSERT_TRUE(Eventually([&] { return KvBlocksUsed() == 0; }, 10s));
  ChildProcess* curl = StartLongStream("long", /*stream=*/true);
  // The request holds blocks on the worker while it streams.
  ASSERT_TRUE(Eventually([&] { return KvBlocksUsed() > 0; }, 30s)) << Logs();
  curl->Signal(SIGKILL);
  ASSERT_TRUE(curl->WaitExit(5s));
  EXPECT_TRUE(Eventually([&] { return KvBlocksUsed() == 0; }, 10s)) << Logs();
  // The worker still serves.
  HttpResult r = Post("/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 3}});
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(RuntimeAggTest, AKilledWorkerFailsItsRequestsLeavesDiscoveryAndARestartServes) {
  ChildProcess* streamed = StartLongStream("streamed", /*stream=*/true);
  ChildProcess* whole = StartLongStream("whole", /*stream=*/false);
  ASSERT_TRUE(Eventually([&] { return Read("streamed.out").find("data: ") != std::string::npos; },
                         30s)) << Logs();
  ASSERT_TRUE(Eventually([&] { return KvBlocksUsed() > 0; }, 30s));

  const auto killed_at = std::chrono::steady_clock::now();
  worker_->Signal(SIGKILL);
  ASSERT_TRUE(worker_->WaitExit(5s));
  // In-flight requests end with an error, well within their deadline (60 s).
  ASSERT_TRUE(streamed->WaitExit(10s));
  ASSERT_TRUE(whole->WaitExit(10s));
  int errors = 0;
  bool done = false;
  StreamText(Read("streamed.out"), false, &errors, &done);
  EXPECT_EQ(Read("streamed.code"), "200");  // the stream had started
  EXPECT_EQ(errors, 1) << Read("streamed.out");
  EXPECT_TRUE(done);
  EXPECT_EQ(Read("whole.code"), "500") << Read("whole.out");
  EXPECT_NE(Read("whole.out").find("worker"), std::string::npos) << Read("whole.out");

  // Gone from discovery within 5 s: /health and requests answer 503.
  ASSERT_TRUE(Eventually([&] { return Get("/health").status == 503; }, 5s));
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, 6s);
  HttpResult none = Post("/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 3}});
  EXPECT_EQ(none.status, 503) << none.body;
  EXPECT_NE(none.body.find("no worker available"), std::string::npos) << none.body;
  int leftover = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "discovery"))
    leftover += e.path().extension() == ".json";
  EXPECT_EQ(leftover, 0);

  StartWorker();  // waits for /health 200
  HttpResult again = Post("/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 3}});
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_TRUE(Eventually([&] { return KvBlocksUsed() == 0; }, 10s));
}

}  // namespace
}  // namespace tandem
