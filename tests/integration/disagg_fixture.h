// The fixture and helpers of the disaggregated-serving integration tests (disagg_test.cc,
// disagg_failover_test.cc): real `tandem` processes on 127.0.0.1, one aggregated reference
// server (`tandem run --mode agg`) shared by the whole DisaggTest suite across both files.
#pragma once

#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "process_util.h"
#include "http_util.h"
#include "subprocess.h"

namespace tandem::disagg_it {


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
using json = nlohmann::json;

constexpr int kBlockSize = 16;  // the workers' default --block-size
constexpr const char* kNumKvBlocks = "2048";

inline int CountOf(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size()))
    ++n;
  return n;
}

inline int CeilBlocks(int tokens) { return (tokens + kBlockSize - 1) / kBlockSize; }

inline HttpResult Get(const std::string& url) { return Curl(ShellQuote(url), 5); }
inline HttpResult Post(const std::string& url, const json& body, int timeout_s = 120) {
  return Curl("-N -H 'content-type: application/json' -d " + ShellQuote(body.dump()) + " " +
                  ShellQuote(url),
              timeout_s);
}

// Choice 0's text of a non-streamed response ("" when it is not one).
inline std::string ResponseText(const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("choices") || j["choices"].empty()) return "";
  const auto& c = j["choices"][0];
  if (c.contains("message")) return c["message"].value("content", "");
  return c.value("text", "");
}

inline int PromptTokens(const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("usage")) return -1;
  return j["usage"].value("prompt_tokens", -1);
}

inline json ChatBody(json messages, int max_tokens) {
  return {{"messages", std::move(messages)}, {"max_tokens", max_tokens}, {"temperature", 0},
          {"chat_template_kwargs", {{"enable_thinking", false}}}};
}
inline json CompletionBody(json prompt, int max_tokens) {
  return {{"prompt", std::move(prompt)}, {"max_tokens", max_tokens}, {"temperature", 0}};
}
inline std::string PathOf(const json& body) {
  return body.contains("messages") ? "/v1/chat/completions" : "/v1/completions";
}

inline const json& LongGolden() {
  static const json golden = [] {
    auto g = ReadJsonFile(GoldenDir() + "/tiny-qwen3-long.json");
    return g.ok() ? (*g)["generation_long"] : json::array();
  }();
  return golden;
}

// Prompt ids [begin, end) of the long golden prompt i, as a completions token-id prompt.
inline json LongIds(int i, size_t begin, size_t end) {
  const auto& ids = LongGolden()[i]["prompt_ids"];
  return json(std::vector<int>(ids.begin() + begin, ids.begin() + end));
}

class DisaggTest : public ::testing::Test {
 protected:
  // The aggregated reference: one `tandem run --mode agg` for the whole suite, started on first
  // use.
  static inline fs::path ref_dir_;
  static inline std::unique_ptr<ChildProcess> ref_;
  static inline std::string ref_base_;
  static inline std::map<std::string, std::string> ref_cache_;

  // Started before the first test so that it loads while the first test's workers do.
  static void SetUpTestSuite() { StartReference(); }
  static void TearDownTestSuite() {
    ref_.reset();
    if (!ref_dir_.empty()) fs::remove_all(ref_dir_);
  }
  static void StartReference() {
    ref_dir_ = fs::temp_directory_path() / ("tandem-disagg-ref-" + std::to_string(getpid()));
    fs::remove_all(ref_dir_);
    fs::create_directories(ref_dir_ / "discovery");
    const int port = testing::FreePort();
    ref_base_ = "http://127.0.0.1:" + std::to_string(port);
    ref_ = ChildProcess::Start({TANDEM_BINARY, "run", "--mode", "agg", "--port",
                                std::to_string(port), "--num-kv-blocks", kNumKvBlocks},
                               {{"TANDEM_DISCOVERY_DIR", (ref_dir_ / "discovery").string()}},
                               (ref_dir_ / "ref.log").string());
  }

  // The reference's greedy text for `body` (non-streamed); "" and a test failure when it has none.
  std::string Reference(const json& body) {
    const std::string key = body.dump();
    if (auto it = ref_cache_.find(key); it != ref_cache_.end()) return it->second;
    if (!ref_ || !ref_->Running()) StartReference();
    if (!ref_ || !Eventually([&] { return Get(ref_base_ + "/health").status == 200; }, 120s)) {
      ADD_FAILURE() << "the aggregated reference did not start\n" << ReadText(ref_dir_ / "ref.log");
      return "";
    }
    HttpResult r = Post(ref_base_ + PathOf(body), body);
    if (r.status != 200) {
      ADD_FAILURE() << "reference: " << r.status << " " << r.body;
      return "";
    }
    return ref_cache_[key] = ResponseText(r.body);
  }

  void SetUp() override {
    ASSERT_EQ(LongGolden().size(), 2u);
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = fs::temp_directory_path() / ("tandem-disagg-it-" + std::to_string(getpid()) + "-" + test);
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "discovery");
    ns_ = "disagg-" + std::to_string(getpid());
    const int port = testing::FreePort();
    ASSERT_GT(port, 0);
    base_ = "http://127.0.0.1:" + std::to_string(port);
    frontend_ = ChildProcess::Start({TANDEM_BINARY, "frontend", "--port", std::to_string(port),
                                     "--namespace", ns_, "--request-timeout-s", "60"},
                                    Env(), (dir_ / "frontend.log").string());
    ASSERT_TRUE(frontend_);
    ASSERT_TRUE(Eventually([&] { return Get(base_ + "/health").status == 503; }, 30s)) << Logs();
  }

  void TearDown() override {
    for (auto& c : curls_) c.reset();
    frontend_.reset();
    decode_.reset();
    prefill_.reset();
    if (HasFailure()) std::cerr << Logs();
    fs::remove_all(dir_);
  }

  std::vector<std::pair<std::string, std::string>> Env() const {
    return {{"TANDEM_DISCOVERY_DIR", (dir_ / "discovery").string()}};
  }

  // Discovery entries of `component` in this test's namespace whose process is `pid`.
  int Registered(const std::string& component, pid_t pid) const {
    int n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_ / "discovery" / ns_ / component, ec)) {
      if (e.path().extension() != ".json") continue;
      auto j = json::parse(ReadText(e.path()), nullptr, false);
      if (j.is_discarded()) continue;
      const bool meta_pid = j.contains("metadata") && j["metadata"].is_object() &&
                            j["metadata"].value("pid", -1) == pid;
      n += (j.value("pid", -1) == pid || meta_pid) ? 1 : 0;
    }
    return n;
  }

  // Starts the workers at once (they load the model in parallel): a decode worker with this
  // threshold and, unless `with_prefill` is false, a prefill worker; returns once the frontend
  // routes to the decode worker and the decode worker sees the prefill worker.
  void StartWorkers(bool with_prefill, int max_local_prefill_tokens,
                    std::vector<std::string> extra = {}) {
    if (with_prefill) LaunchPrefill();
    const int port = testing::FreePort();
    decode_metrics_ = "http://127.0.0.1:" + std::to_string(port) + "/metrics";
    std::vector<std::string> argv = {
        TANDEM_BINARY, "worker", "--mode", "decode", "--namespace", ns_, "--port", "0",
        "--device", "cpu", "--num-kv-blocks", kNumKvBlocks, "--metrics-port", std::to_string(port),
        "--stats-interval-s", "0.5", "--max-local-prefill-tokens",
        std::to_string(max_local_prefill_tokens)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    decode_ = ChildProcess::Start(argv, Env(), (dir_ / "decode.log").string());
    ASSERT_TRUE(decode_);
    ASSERT_TRUE(Eventually([&] { return Get(base_ + "/health").status == 200; }, 120s)) << Logs();
    ASSERT_TRUE(Eventually([&] { return Get(decode_metrics_).status == 200; }, 10s)) << Logs();
    if (with_prefill) AwaitPrefill();
  }

  // A (re)started prefill worker, once the decode worker sees it.
  void StartPrefill() {
    LaunchPrefill();
    AwaitPrefill();
  }

  void LaunchPrefill() {
    const int n = ++num_prefill_started_;
    const std::string port = std::to_string(testing::FreePort());
    prefill_metrics_ = "http://127.0.0.1:" + port + "/metrics";
    prefill_ = ChildProcess::Start(
        {TANDEM_BINARY, "worker", "--mode", "prefill", "--namespace", ns_, "--port", "0",
         "--device", "cpu", "--num-kv-blocks", kNumKvBlocks, "--metrics-port", port},
        Env(), (dir_ / ("prefill-" + std::to_string(n) + ".log")).string());
  }
  // Registered, /metrics up, and the decode worker's client (discovery polled every 500 ms)
  // logged "1 prefill worker(s) available" once per prefill worker started so far (it logs when
  // the set changes: 0 after a kill, 1 after the restart, or 1 once when one poll saw both).
  void AwaitPrefill() {
    ASSERT_TRUE(prefill_);
    ASSERT_TRUE(Eventually([&] { return Registered("prefill", prefill_->pid()) == 1; }, 120s))
        << Logs();
    ASSERT_TRUE(Eventually([&] { return Get(prefill_metrics_).status == 200; }, 10s)) << Logs();
    ASSERT_TRUE(Eventually([&] {
      return CountOf(DecodeLog(), " 1 prefill worker(s) available") >= num_prefill_started_;
    }, 10s)) << Logs();
  }

  std::string Logs() const {
    std::string out;
    std::vector<std::string> names = {"frontend.log", "decode.log"};
    for (int i = 1; i <= num_prefill_started_; ++i)
      names.push_back("prefill-" + std::to_string(i) + ".log");
    for (const auto& name : names) out += "---- " + name + "\n" + ReadText(dir_ / name);
    return out;
  }
  std::string DecodeLog() const { return ReadText(dir_ / "decode.log"); }

  // The decode worker's metrics (-1 each when it does not answer).
  struct DecodeMetrics {
    double transfers = -1, bytes = -1, errors = -1, fallbacks = -1, blocks_used = -1,
           cache_queries = -1, cache_hits = -1, external_hits = -1;
  };
  DecodeMetrics Decode() {
    DecodeMetrics m;
    HttpResult r = Get(decode_metrics_);
    if (r.status != 200) return m;
    m.transfers = MetricValue(r.body, "tandem_kv_transfers_total");
    m.bytes = MetricValue(r.body, "tandem_kv_transfer_bytes_total");
    m.errors = MetricValue(r.body, "tandem_kv_transfer_errors_total");
    m.fallbacks = MetricValue(r.body, "tandem_remote_prefill_fallbacks_total");
    m.blocks_used = MetricValue(r.body, "tandem_kv_blocks_used");
    m.cache_queries = MetricValue(r.body, "tandem_prefix_cache_queries_total");
    m.cache_hits = MetricValue(r.body, "tandem_prefix_cache_hits_total");
    m.external_hits = MetricValue(r.body, "tandem_external_prefix_cache_hits_total");
    return m;
  }
  double PrefillMetric(const std::string& name) {
    HttpResult r = Get(prefill_metrics_);
    return r.status == 200 ? MetricValue(r.body, name) : -1;
  }
  bool BlocksFreed(bool prefill_too) {
    return Eventually([&] { return Decode().blocks_used == 0; }, 10s) &&
           (!prefill_too ||
            Eventually([&] { return PrefillMetric("tandem_kv_blocks_used") == 0; }, 10s));
  }

  // Sends `body` through the frontend; its text (non-streamed) must be `want`.
  HttpResult Expect(const json& body, const std::string& want) {
    HttpResult r = Post(base_ + PathOf(body), body);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(ResponseText(r.body), want) << body.dump().substr(0, 300);
    return r;
  }

  // A background curl (non-streamed) writing <name>.out and <name>.code.
  ChildProcess* StartCurl(const std::string& name, const json& body, int timeout_s) {
    curls_.push_back(ChildProcess::Start(
        {"curl", "-sN", "-m", std::to_string(timeout_s), "-o", (dir_ / (name + ".out")).string(),
         "-w", "%{http_code}", "-H", "content-type: application/json", "-d", body.dump(),
         base_ + PathOf(body)},
        {}, (dir_ / (name + ".code")).string()));
    return curls_.back().get();
  }

  fs::path dir_;
  std::string ns_, base_, decode_metrics_, prefill_metrics_;
  int num_prefill_started_ = 0;
  std::unique_ptr<ChildProcess> frontend_, decode_, prefill_;
  std::vector<std::unique_ptr<ChildProcess>> curls_;
};

}  // namespace tandem::disagg_it
