// Issue 21: a short total outage costs latency, not errors. `tandem frontend --wait-for-worker-s`
// as a separate process on 127.0.0.1 (private discovery directory), driven with curl:
//   - a request sent while no worker is live, a worker started a second later: 200;
//   - no worker at all: 503 with an OpenAI-style JSON error after about the wait (not at once,
//     not long past it);
//   - /health names the empty pool: 503 {"status":"unhealthy","reason":...,"pools":{...}}, then
//     200 {"status":"ok","pools":{"agg":1,...}} once a worker is live.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http_util.h"
#include "process_util.h"
#include "subprocess.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::ChildProcess;
using testing::Curl;
using testing::Eventually;
using testing::HttpResult;
using testing::ReadText;
using testing::ShellQuote;
using Clock = std::chrono::steady_clock;

class WaitForWorkerIT : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tandem-wait-it-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "discovery");
    ns_ = "wait-" + std::to_string(getpid());
  }
  void TearDown() override {
    curl_.reset();
    worker_.reset();
    frontend_.reset();
    if (HasFailure()) std::cerr << Logs();
    fs::remove_all(dir_);
  }
  std::vector<std::pair<std::string, std::string>> Env() const {
    return {{"TANDEM_DISCOVERY_DIR", (dir_ / "discovery").string()}};
  }
  void StartFrontend(const std::string& wait_s) {
    const int port = testing::FreePort();
    ASSERT_GT(port, 0);
    base_ = "http://127.0.0.1:" + std::to_string(port);
    frontend_ = ChildProcess::Start({TANDEM_BINARY, "frontend", "--port", std::to_string(port), "--namespace",
                                     ns_, "--request-timeout-s", "60", "--wait-for-worker-s", wait_s},
                                    Env(), (dir_ / "frontend.log").string());
    ASSERT_TRUE(frontend_);
    ASSERT_TRUE(Eventually([&] { return Get("/health").status == 503; }, 30s)) << Logs();
  }
  void StartWorker(const std::string& mode) {
    worker_ = ChildProcess::Start({TANDEM_BINARY, "worker", "--mode", mode, "--namespace", ns_, "--port", "0",
                                   "--device", "cpu"},
                                  Env(), (dir_ / "worker.log").string());
    ASSERT_TRUE(worker_);
  }
  std::string Logs() const {
    std::string out;
    for (const char* name : {"frontend.log", "worker.log", "curl.out"}) {
      std::ifstream in(dir_ / name);
      std::stringstream ss;
      ss << in.rdbuf();
      out += std::string("---- ") + name + "\n" + ss.str();
    }
    return out;
  }
  HttpResult Get(const std::string& path) { return Curl(ShellQuote(base_ + path), 5); }
  HttpResult Post(const json& body, int timeout_s = 60) {
    return Curl("-H 'content-type: application/json' -d " + ShellQuote(body.dump()) + " " +
                    ShellQuote(base_ + "/v1/completions"),
                timeout_s);
  }

  fs::path dir_;
  std::string ns_, base_;
  std::unique_ptr<ChildProcess> frontend_, worker_, curl_;
};

TEST_F(WaitForWorkerIT, ARequestSentWhileNoWorkerIsLiveIsServedByOneStartedLater) {
  StartFrontend("60");  // longer than a worker's start-up here (it loads the model)
  const json body = {{"prompt", "Hello"}, {"max_tokens", 3}, {"temperature", 0}};
  curl_ = ChildProcess::Start({"curl", "-s", "-m", "90", "-o", (dir_ / "curl.out").string(), "-w", "%{http_code}",
                               "-H", "content-type: application/json", "-d", body.dump(),
                               base_ + "/v1/completions"},
                              {}, (dir_ / "curl.code").string());
  ASSERT_TRUE(curl_);
  std::this_thread::sleep_for(1500ms);
  EXPECT_TRUE(curl_->Running()) << "answered with no worker: " << ReadText(dir_ / "curl.out");
  StartWorker("agg");
  ASSERT_TRUE(curl_->WaitExit(90s)) << Logs();
  EXPECT_EQ(ReadText(dir_ / "curl.code"), "200") << ReadText(dir_ / "curl.out");
  auto answer = json::parse(ReadText(dir_ / "curl.out"), nullptr, false);
  ASSERT_FALSE(answer.is_discarded()) << ReadText(dir_ / "curl.out");
  EXPECT_FALSE(answer["choices"][0]["text"].get<std::string>().empty());
}

TEST_F(WaitForWorkerIT, WithNoWorkerA503ComesAfterTheWait) {
  StartFrontend("2");
  const auto start = Clock::now();
  HttpResult r = Post({{"prompt", "Hello"}, {"max_tokens", 3}});
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_GE(took, 1.8) << "answered before the wait was over";
  EXPECT_LT(took, 5.0) << "answered long after the wait";
  auto e = json::parse(r.body, nullptr, false);
  ASSERT_FALSE(e.is_discarded()) << r.body;
  EXPECT_EQ(e["error"]["type"], "server_error") << r.body;
  EXPECT_NE(e["error"]["message"].get<std::string>().find("no worker available"), std::string::npos) << r.body;
}

TEST_F(WaitForWorkerIT, HealthNamesTheEmptyPool) {
  StartFrontend("1");
  HttpResult none = Get("/health");
  EXPECT_EQ(none.status, 503);
  EXPECT_EQ(json::parse(none.body, nullptr, false),
            json::parse(R"({"status":"unhealthy","reason":"no live worker","pools":{"decode":0,"prefill":0}})"))
      << none.body;
  // A prefill worker alone serves nothing: still 503, naming the decode pool.
  StartWorker("prefill");
  ASSERT_TRUE(Eventually([&] { return json::parse(Get("/health").body, nullptr, false)["pools"]["prefill"] == 1; },
                         120s)) << Logs();
  HttpResult prefill_only = Get("/health");
  EXPECT_EQ(prefill_only.status, 503);
  EXPECT_EQ(json::parse(prefill_only.body, nullptr, false),
            json::parse(R"({"status":"unhealthy","reason":"no live decode worker","pools":{"decode":0,"prefill":1}})"))
      << prefill_only.body;
  worker_.reset();
  StartWorker("agg");
  ASSERT_TRUE(Eventually([&] { return Get("/health").status == 200; }, 120s)) << Logs();
  auto up = json::parse(Get("/health").body, nullptr, false);
  EXPECT_EQ(up["status"], "ok");
  EXPECT_EQ(up["pools"]["agg"], 1) << up.dump();
}

}  // namespace
}  // namespace tandem
