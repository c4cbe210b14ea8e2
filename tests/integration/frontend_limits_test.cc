// The HTTP frontend of `tandem run --mode agg` (the bundled tiny model on the CPU) at its limits,
// one server for the suite: an `n` beyond what the engine can ever hold (max_num_seqs +
// max_waiting_requests) is a 400 naming the limit, not a 503 "queue full"; HEAD on the GET routes;
// a compressed body is a 415; a prompt larger than the whole KV pool is a 400.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

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
using testing::HttpResult;
using testing::ShellQuote;

// curl with extra arguments (shell words) and a JSON body, to base + path.
HttpResult PostJsonTo(const std::string& base, const std::string& path, const json& body,
                    const std::string& args = "") {
  return Curl(args + " -H 'Content-Type: application/json' --data-binary " +
                  ShellQuote(body.dump()) + " " + ShellQuote(base + path), 60);
}

// The 400 for a 1100-token prompt on a pool of 64 blocks of 16 tokens (69 needed).
void ExpectKvPoolTooSmall(const HttpResult& r) {
  EXPECT_EQ(r.status, 400) << r.body;
  json e = json::parse(r.body, nullptr, false)["error"];
  EXPECT_EQ(e["type"], "invalid_request_error") << r.body;
  EXPECT_NE(e["message"].get<std::string>().find("64 blocks"), std::string::npos) << r.body;
}

class FrontendLimitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("tandem-frontend-limits-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const int port = testing::FreePort();
    base_ = "http://127.0.0.1:" + std::to_string(port);
    server_ = ChildProcess::Start({TANDEM_BINARY, "run", "--mode", "agg", "--port",
                                   std::to_string(port), "--num-kv-blocks", "64", "--max-num-seqs",
                                   "2", "--max-waiting-requests", "1"},
                                  {}, (dir_ / "run.log").string());
    ready_ = server_ && testing::Eventually([] { return Curl(ShellQuote(base_ + "/health"), 5).status == 200; },
                                            120s);
  }
  static void TearDownTestSuite() {
    server_.reset();
    fs::remove_all(dir_);
  }
  void SetUp() override {
    ASSERT_TRUE(ready_) << "tandem run did not start\n" << testing::ReadText(dir_ / "run.log");
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "---- run.log\n" << testing::ReadText(dir_ / "run.log");
  }

  static HttpResult PostJson(const std::string& path, const json& body, const std::string& args = "") {
    return PostJsonTo(base_, path, body, args);
  }

  static inline fs::path dir_;
  static inline std::string base_;
  static inline std::unique_ptr<ChildProcess> server_;
  static inline bool ready_ = false;
};

TEST_F(FrontendLimitsTest, MoreChoicesThanTheEngineCanHoldIsA400) {
  HttpResult r = PostJson("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}, {"n", 4}});
  EXPECT_EQ(r.status, 400) << r.body;
  json e = json::parse(r.body, nullptr, false)["error"];
  EXPECT_EQ(e["param"], "n") << r.body;
  EXPECT_EQ(e["type"], "invalid_request_error") << r.body;
  EXPECT_NE(e["message"].get<std::string>().find("3"), std::string::npos) << r.body;  // 2 + 1
  r = PostJson("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}, {"n", 3}});
  EXPECT_EQ(r.status, 200) << r.body;
}

// A prompt the whole KV pool (64 blocks of 16 tokens) can never hold, though within the context,
// is a 400: it was a 503 engine_overloaded, which clients retry for ever.
TEST_F(FrontendLimitsTest, APromptLargerThanTheKvPoolIsA400) {
  std::vector<int> ids(1100, 1000);  // 69 blocks
  HttpResult r = PostJson("/v1/completions", {{"prompt", ids}, {"max_tokens", 1}});
  ExpectKvPoolTooSmall(r);
  ids.resize(1000);  // 63 blocks: fits
  r = PostJson("/v1/completions", {{"prompt", ids}, {"max_tokens", 1}});
  EXPECT_EQ(r.status, 200) << r.body;
}

// The same through a remote worker (`tandem run`'s default graph: frontend, decode and prefill
// workers in their own processes): the decode worker's refusal reaches the client as the same 400,
// without the worker's address (it was a 500).
TEST(FrontendLimitsRemoteTest, APromptLargerThanTheWorkersKvPoolIsA400) {
  const fs::path dir = fs::temp_directory_path() / ("tandem-limits-remote-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "discovery");
  const int port = testing::FreePort();
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  auto server = ChildProcess::Start({TANDEM_BINARY, "run", "--port", std::to_string(port),
                                     "--num-kv-blocks", "64"},
                                    {{"TANDEM_DISCOVERY_DIR", (dir / "discovery").string()}},
                                    (dir / "run.log").string());
  ASSERT_TRUE(server);
  ASSERT_TRUE(testing::Eventually([&] { return Curl(ShellQuote(base + "/health"), 5).status == 200; }, 120s))
      << testing::ReadText(dir / "run.log");
  std::vector<int> ids(1100, 1000);
  HttpResult r = PostJsonTo(base, "/v1/completions", {{"prompt", ids}, {"max_tokens", 1}});
  ExpectKvPoolTooSmall(r);
  EXPECT_EQ(r.body.find("127.0.0.1"), std::string::npos) << r.body;
  server.reset();
  fs::remove_all(dir);
}

// HEAD on the GET routes answers like GET without a body (it was 405).
TEST_F(FrontendLimitsTest, HeadOnGetRoutes) {
  for (const char* path : {"/health", "/v1/models", "/metrics"}) {
    HttpResult r = Curl("-I " + ShellQuote(base_ + path), 10);
    EXPECT_EQ(r.status, 200) << path << "\n" << r.body;
  }
}

// A gzip body is not parsed as JSON (it was answered 200 as if it were plain).
TEST_F(FrontendLimitsTest, CompressedBodyIs415) {
  HttpResult r = PostJson("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}},
                          "-H 'Content-Encoding: gzip'");
  EXPECT_EQ(r.status, 415) << r.body;
  EXPECT_TRUE(json::parse(r.body, nullptr, false).contains("error")) << r.body;
}

}  // namespace
}  // namespace tandem
