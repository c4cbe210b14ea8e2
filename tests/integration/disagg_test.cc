// Disaggregated serving as real processes on 127.0.0.1: tandem frontend -> tandem worker --mode
// decode (+ tandem worker --mode prefill), each test with a private discovery directory
// (TANDEM_DISCOVERY_DIR) and namespace, driven with curl; the decode and prefill workers' own
// /metrics (--metrics-port) and logs are read back:
//   - every prompt prefilled remotely (--max-local-prefill-tokens 0): golden greedy text for every
//     golden prompt, chat and completions, streamed and not; one KV transfer per request, no
//     fallback, the decode worker's "KV Transfer metrics:" log line;
//   - conditional disaggregation (threshold 64): a short prompt makes no transfer, a long one
//     exactly one, with the text of an aggregated server (`tandem run --mode agg`, the reference,
//     shared by the whole suite);
//   - multi-turn (threshold 16): only the blocks the decode worker lacks cross the wire (bytes per
//     block from turn 1, cached blocks from the decode worker's prefix cache hits, and exactly
//     for a token-id prompt that extends turn 1's); a repeated prompt transfers nothing;
//   - kill -9 of the prefill worker while it computes: the request falls back to local prefill
//     (aggregated text) or fails with a clear error, within its deadline; a restarted prefill
//     worker serves the next long prompt remotely; KV blocks return to 0 on both workers;
//   - a decode worker without any prefill worker serves long prompts locally (aggregated text).
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
using testing::SharedDir;
using testing::StreamText;
using json = nlohmann::json;

constexpr int kBlockSize = 16;  // the workers' default --block-size
constexpr const char* kNumKvBlocks = "2048";

int CountOf(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size()))
    ++n;
  return n;
}

int CeilBlocks(int tokens) { return (tokens + kBlockSize - 1) / kBlockSize; }

HttpResult Get(const std::string& url) { return Curl(ShellQuote(url), 5); }
HttpResult Post(const std::string& url, const json& body, int timeout_s = 120) {
  return Curl("-N -H 'content-type: application/json' -d " + ShellQuote(body.dump()) + " " +
                  ShellQuote(url),
              timeout_s);
}

// Choice 0's text of a non-streamed response ("" when it is not one).
std::string ResponseText(const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("choices") || j["choices"].empty()) return "";
  const auto& c = j["choices"][0];
  if (c.contains("message")) return c["message"].value("content", "");
  return c.value("text", "");
}

int PromptTokens(const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("usage")) return -1;
  return j["usage"].value("prompt_tokens", -1);
}

json ChatBody(json messages, int max_tokens) {
  return {{"messages", std::move(messages)}, {"max_tokens", max_tokens}, {"temperature", 0},
          {"chat_template_kwargs", {{"enable_thinking", false}}}};
}
json CompletionBody(json prompt, int max_tokens) {
  return {{"prompt", std::move(prompt)}, {"max_tokens", max_tokens}, {"temperature", 0}};
}
std::string PathOf(const json& body) {
  return body.contains("messages") ? "/v1/chat/completions" : "/v1/completions";
}

const json& LongGolden() {
  static const json golden = [] {
    auto g = ReadJsonFile(SharedDir() + "/golden/tiny-qwen3-long.json");
    return g.ok() ? (*g)["generation_long"] : json::array();
  }();
  return golden;
}

// Prompt ids [begin, end) of the long golden prompt i, as a completions token-id prompt.
json LongIds(int i, size_t begin, size_t end) {
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
  // the count changes: 0 after a kill, 1 after the restart).
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

TEST_F(DisaggTest, EveryPromptPrefilledRemotelyGivesGoldenTextWithOneTransferPerRequest) {
  StartWorkers(/*with_prefill=*/true, /*max_local_prefill_tokens=*/0);
  auto golden = ReadJsonFile(SharedDir() + "/golden/tiny-qwen3.json");
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();
  const DecodeMetrics start = Decode();
  ASSERT_EQ(start.transfers, 0);
  ASSERT_EQ(start.fallbacks, 0);
  int checked = 0;
  for (const auto& c : (*golden)["generation"]) {
    const bool chat = c["chat"].get<bool>();
    json body;
    if (chat) {
      const auto& m = c["messages"];
      body = ChatBody(m.is_string() ? json::array({{{"role", "user"}, {"content", m}}}) : m,
                      static_cast<int>(c["greedy_ids"].size()));
    } else {
      body = CompletionBody(c["prompt"], static_cast<int>(c["greedy_ids"].size()));
    }
    const std::string want = c["greedy_text"].get<std::string>();
    SCOPED_TRACE(body.dump());
    for (bool stream : {false, true}) {
      body["stream"] = stream;
      const double before = Decode().transfers;
      HttpResult r = Post(base_ + PathOf(body), body);
      ASSERT_EQ(r.status, 200) << r.body;
      if (stream) {
        int errors = 0;
        bool done = false;
        EXPECT_EQ(StreamText(r.body, chat, &errors, &done), want);
        EXPECT_EQ(errors, 0);
        EXPECT_TRUE(done);
      } else {
        EXPECT_EQ(ResponseText(r.body), want);
        EXPECT_EQ(PromptTokens(r.body), static_cast<int>(c["prompt_ids"].size()));
      }
      // The transfer is counted before the first token goes out.
      EXPECT_EQ(Decode().transfers, before + 1) << "stream=" << stream;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 8);
  const DecodeMetrics end = Decode();
  EXPECT_EQ(end.transfers, 16);
  EXPECT_EQ(end.fallbacks, 0);
  EXPECT_EQ(end.errors, 0);
  EXPECT_GT(end.bytes, 0);
  EXPECT_EQ(CountOf(DecodeLog(), "] remote prefill: "), 16);
  EXPECT_EQ(CountOf(DecodeLog(), "remote prefill failed"), 0);
  // The KV transfer backend in use, logged once at start-up by each worker (issue 7).
  EXPECT_EQ(CountOf(DecodeLog(), "KV transfer backend: tcp (host memory)"), 1) << DecodeLog();
  EXPECT_EQ(CountOf(ReadText(dir_ / "prefill-1.log"), "KV transfer backend: tcp (host memory)"), 1);
  static const std::regex line(
      "KV Transfer metrics: Num successful transfers=16, Avg xfer time \\(ms\\)=[0-9.]+, "
      "Avg MB per transfer=[0-9.]+, Throughput \\(MB/s\\)=[0-9.]+");
  EXPECT_TRUE(Eventually([&] { return std::regex_search(DecodeLog(), line); }, 10s)) << DecodeLog();
  EXPECT_TRUE(Eventually([&] {
    return DecodeLog().find("External prefix cache hit rate: ") != std::string::npos;
  }, 10s));
  EXPECT_TRUE(BlocksFreed(/*prefill_too=*/true));
}

TEST_F(DisaggTest, OnlyPromptsOverTheThresholdArePrefilledRemotely) {
  StartWorkers(/*with_prefill=*/true, /*max_local_prefill_tokens=*/64);
  // Short: prefilled on the decode worker, nothing crosses.
  const json short_body = CompletionBody("The man looked at the", 16);
  const std::string short_want = Reference(short_body);
  HttpResult s = Expect(short_body, short_want);
  EXPECT_LT(PromptTokens(s.body), 64);
  DecodeMetrics m = Decode();
  EXPECT_EQ(m.transfers, 0);
  EXPECT_EQ(m.bytes, 0);
  EXPECT_EQ(PrefillMetric("tandem_prefix_cache_queries_total"), 0);  // never asked

  // Long (400 tokens): exactly one transfer of all its blocks, the aggregated text.
  const json long_body = CompletionBody(LongIds(0, 0, 400), 24);
  const std::string long_want = Reference(long_body);
  ASSERT_FALSE(long_want.empty());
  HttpResult l = Expect(long_body, long_want);
  EXPECT_EQ(PromptTokens(l.body), 400);
  m = Decode();
  EXPECT_EQ(m.transfers, 1);
  EXPECT_EQ(m.fallbacks, 0);
  EXPECT_GT(m.bytes, 0);
  EXPECT_EQ(std::fmod(m.bytes, CeilBlocks(400)), 0) << m.bytes;
  EXPECT_EQ(m.external_hits, 400);
  EXPECT_NE(DecodeLog().find("remote prefill: " + std::to_string(CeilBlocks(400)) + " blocks (" +
                             std::to_string(static_cast<uint64_t>(m.bytes)) + " bytes)"),
            std::string::npos) << DecodeLog();
  // The same through a chat request over the threshold, streamed.
  json chat = ChatBody(json::array({{{"role", "user"},
                                     {"content", LongGolden()[1]["prompt"].get<std::string>()
                                                     .substr(0, 1200)}}}),
                       16);
  const std::string chat_want = Reference(chat);
  chat["stream"] = true;
  HttpResult c = Post(base_ + PathOf(chat), chat);
  ASSERT_EQ(c.status, 200) << c.body;
  int errors = 0;
  bool done = false;
  EXPECT_EQ(StreamText(c.body, /*chat=*/true, &errors, &done), chat_want);
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(Decode().transfers, 2);
  EXPECT_TRUE(BlocksFreed(/*prefill_too=*/true));
}

TEST_F(DisaggTest, MultiTurnTransfersOnlyTheBlocksTheDecodeWorkerLacks) {
  // Threshold 16: the new part of each turn alone exceeds it; a repeated prompt (at most one
  // block uncached) stays local.
  StartWorkers(/*with_prefill=*/true, /*max_local_prefill_tokens=*/16);
  const std::string text0 = LongGolden()[0]["prompt"].get<std::string>();
  const std::string text1 = LongGolden()[1]["prompt"].get<std::string>();

  // Chat: turn 1, long unique content: all of its blocks cross.
  json messages = json::array({{{"role", "user"}, {"content", text0.substr(0, 1300)}}});
  DecodeMetrics m0 = Decode();
  HttpResult t1 = Post(base_ + "/v1/chat/completions", ChatBody(messages, 24));
  ASSERT_EQ(t1.status, 200) << t1.body;
  DecodeMetrics m1 = Decode();
  const int p1 = PromptTokens(t1.body);
  ASSERT_GT(p1, 200);
  EXPECT_EQ(m1.transfers - m0.transfers, 1);
  EXPECT_EQ(m1.cache_hits - m0.cache_hits, 0);
  const double bytes1 = m1.bytes - m0.bytes;
  ASSERT_GT(bytes1, 0);
  ASSERT_EQ(std::fmod(bytes1, CeilBlocks(p1)), 0) << bytes1 << " bytes for " << p1 << " tokens";
  const double block_bytes = bytes1 / CeilBlocks(p1);  // one block, all layers

  // Turn 2: the history and a new user message (~150 tokens): only what decode lacks crosses.
  messages.push_back({{"role", "assistant"}, {"content", ResponseText(t1.body)}});
  messages.push_back({{"role", "user"}, {"content", text1.substr(0, 600)}});
  const json turn2 = ChatBody(messages, 16);
  HttpResult t2 = Expect(turn2, Reference(turn2));
  DecodeMetrics m2 = Decode();
  const int p2 = PromptTokens(t2.body);
  ASSERT_GT(p2, p1 + 100);
  EXPECT_EQ(m2.transfers - m1.transfers, 1);
  const double cached2 = m2.cache_hits - m1.cache_hits;  // tokens decode had of turn 2's prompt
  EXPECT_EQ(std::fmod(cached2, kBlockSize), 0);
  // Turn 1's prompt is a prefix of turn 2's up to the generation prompt's "<think></think>".
  EXPECT_GE(cached2, (p1 - 8) / kBlockSize * kBlockSize) << "p1=" << p1;
  EXPECT_LT(cached2, p2);
  const double bytes2 = m2.bytes - m1.bytes;
  EXPECT_EQ(bytes2, (CeilBlocks(p2) - cached2 / kBlockSize) * block_bytes)
      << "p2=" << p2 << " cached=" << cached2;
  EXPECT_LT(bytes2, CeilBlocks(p2) * block_bytes);
  EXPECT_EQ(m2.external_hits - m1.external_hits, p2 - cached2);

  // The same turn 2 again: everything but the last block is cached: nothing crosses.
  Expect(turn2, Reference(turn2));
  DecodeMetrics m3 = Decode();
  EXPECT_EQ(m3.transfers, m2.transfers);
  EXPECT_EQ(m3.bytes, m2.bytes);

  // Completions with token ids, where the cached part is known exactly: turn 1 = 300 ids (18 full
  // blocks cross with the partial 19th), turn 2 = the same 300 + 150 new ids: decode has
  // floor(300 / 16) = 18 blocks, so 29 - 18 = 11 blocks cross.
  const json c1 = CompletionBody(LongIds(1, 1000, 1300), 8);
  Expect(c1, Reference(c1));
  DecodeMetrics m4 = Decode();
  EXPECT_EQ(m4.transfers - m3.transfers, 1);
  EXPECT_EQ(m4.bytes - m3.bytes, CeilBlocks(300) * block_bytes);
  json ids2 = LongIds(1, 1000, 1300);
  for (const auto& id : LongIds(1, 2000, 2150)) ids2.push_back(id);
  const json c2 = CompletionBody(ids2, 8);
  Expect(c2, Reference(c2));
  DecodeMetrics m5 = Decode();
  EXPECT_EQ(m5.transfers - m4.transfers, 1);
  EXPECT_EQ(m5.cache_hits - m4.cache_hits, 300 / kBlockSize * kBlockSize);
  EXPECT_EQ(m5.bytes - m4.bytes, (CeilBlocks(450) - 300 / kBlockSize) * block_bytes);
  EXPECT_NE(DecodeLog().find("remote prefill: " + std::to_string(CeilBlocks(450) - 300 / kBlockSize) +
                             " blocks"),
            std::string::npos);
  // And again: nothing crosses.
  Expect(c2, Reference(c2));
  DecodeMetrics m6 = Decode();
  EXPECT_EQ(m6.transfers, m5.transfers);
  EXPECT_EQ(m6.bytes, m5.bytes);
  EXPECT_EQ(m6.fallbacks, 0);
  EXPECT_TRUE(BlocksFreed(/*prefill_too=*/true));
}

TEST_F(DisaggTest, AKilledPrefillWorkerFallsBackLocallyAndARestartedOneServes) {
  StartWorkers(/*with_prefill=*/true, /*max_local_prefill_tokens=*/64,
               {"--remote-prefill-timeout-s", "30"});
  // The long golden prompts (1500, then 3500 tokens, should the first finish before the kill).
  bool killed_in_flight = false;
  for (int attempt = 0; attempt < 2 && !killed_in_flight; ++attempt) {
    if (attempt > 0) StartPrefill();
    SCOPED_TRACE("attempt " + std::to_string(attempt));
    const json body = CompletionBody(LongGolden()[attempt]["prompt"], 16);
    const std::string want = Reference(body);
    ASSERT_FALSE(want.empty());
    const DecodeMetrics before = Decode();
    const std::string name = "long-" + std::to_string(attempt);
    const auto sent = std::chrono::steady_clock::now();
    ChildProcess* curl = StartCurl(name, body, 90);
    // The remote prefill started: the decode worker reserved the prompt's blocks and called the
    // prefill worker (~1 s of compute for 1500 tokens here; its own gauges only change after the
    // engine step, so they cannot show it). Kill it 300 ms into the call.
    ASSERT_TRUE(Eventually([&] { return Decode().blocks_used > 0; }, 30s)) << Logs();
    std::this_thread::sleep_for(300ms);
    prefill_->Signal(SIGKILL);
    ASSERT_TRUE(prefill_->WaitExit(5s));
    const auto killed = std::chrono::steady_clock::now();
    // Done well within its deadline (frontend 60 s, remote prefill 30 s).
    ASSERT_TRUE(curl->WaitExit(60s)) << Logs();
    const auto finished = std::chrono::steady_clock::now();
    const DecodeMetrics after = Decode();
    const std::string code = ReadText(dir_ / (name + ".code"));
    const std::string out = ReadText(dir_ / (name + ".out"));
    std::cerr << "attempt " << attempt << ": killed "
              << std::chrono::duration<double>(killed - sent).count() << " s after sending, done "
              << std::chrono::duration<double>(finished - killed).count() << " s later: " << code
              << "\n";
    if (after.transfers > before.transfers) {
      // The prefill finished first: not the case under test; try the longer prompt.
      EXPECT_EQ(code, "200");
      EXPECT_EQ(ResponseText(out), want);
      continue;
    }
    killed_in_flight = true;
    EXPECT_EQ(after.transfers, before.transfers);
    if (code == "200") {
      // Local fallback: the aggregated text.
      EXPECT_EQ(ResponseText(out), want) << out;
      EXPECT_EQ(after.fallbacks, before.fallbacks + 1);
      const std::string log = DecodeLog();
      const size_t at = log.find("remote prefill failed, prefilling locally");
      ASSERT_NE(at, std::string::npos) << log;
      EXPECT_EQ(CountOf(log, "remote prefill failed, prefilling locally"), 1) << log;
      std::cerr << log.substr(at, log.find('\n', at) - at) << "\n";
    } else {
      // Or a clear error.
      auto j = json::parse(out, nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << code << " " << out;
      ASSERT_TRUE(j.contains("error")) << out;
      EXPECT_FALSE(j["error"].value("message", "").empty()) << out;
    }
    EXPECT_TRUE(Eventually([&] { return Decode().blocks_used == 0; }, 10s));
  }
  ASSERT_TRUE(killed_in_flight) << "the prefill worker always finished before it was killed";

  // A restarted prefill worker serves the next long (different) prompt.
  StartPrefill();
  const json next = CompletionBody(LongIds(1, 500, 1300), 16);
  const std::string want = Reference(next);
  const DecodeMetrics before = Decode();
  Expect(next, want);
  const DecodeMetrics after = Decode();
  EXPECT_EQ(after.transfers, before.transfers + 1);
  EXPECT_EQ(after.fallbacks, before.fallbacks);
  EXPECT_TRUE(BlocksFreed(/*prefill_too=*/true)) << "decode "
      << Decode().blocks_used << ", prefill " << PrefillMetric("tandem_kv_blocks_used");
}

TEST_F(DisaggTest, ADecodeWorkerWithoutPrefillWorkersServesLongPromptsLocally) {
  StartWorkers(/*with_prefill=*/false, /*max_local_prefill_tokens=*/64,
               {"--remote-prefill-timeout-s", "30"});
  const json body = CompletionBody(LongGolden()[0]["prompt"], 32);
  const std::string want = Reference(body);
  EXPECT_EQ(want, LongGolden()[0]["greedy_text"].get<std::string>());
  const auto sent = std::chrono::steady_clock::now();
  HttpResult r = Expect(body, want);
  EXPECT_LT(std::chrono::steady_clock::now() - sent, 30s);
  EXPECT_EQ(PromptTokens(r.body), 1500);
  // Streamed, and a chat request over the threshold.
  json streamed = body;
  streamed["stream"] = true;
  HttpResult s = Post(base_ + "/v1/completions", streamed);
  ASSERT_EQ(s.status, 200) << s.body;
  int errors = 0;
  bool done = false;
  // The prompt is cached now (all but its last block): it may prefill locally without asking.
  EXPECT_EQ(StreamText(s.body, /*chat=*/false, &errors, &done), want);
  EXPECT_EQ(errors, 0);
  const json chat = ChatBody(
      json::array({{{"role", "user"},
                    {"content", LongGolden()[1]["prompt"].get<std::string>().substr(0, 1500)}}}),
      16);
  Expect(chat, Reference(chat));
  const DecodeMetrics m = Decode();
  EXPECT_EQ(m.transfers, 0);
  EXPECT_EQ(m.fallbacks, 2);
  EXPECT_EQ(CountOf(DecodeLog(), "remote prefill failed, prefilling locally"), 2) << DecodeLog();
  EXPECT_EQ(m.blocks_used, 0);
  EXPECT_TRUE(BlocksFreed(/*prefill_too=*/false));
}

}  // namespace
}  // namespace tandem
