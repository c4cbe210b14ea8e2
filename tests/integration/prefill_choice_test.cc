// The frontend's choice of the prefill worker reaches the decode worker (DESIGN.md section 1:
// "router chooses (decode D, prefill P)"; issue 8), as real processes on 127.0.0.1: tandem frontend
// (debug log) -> tandem worker --mode decode (--max-local-prefill-tokens 64) -> two tandem worker
// --mode prefill (instance ids pa, pb), a private discovery directory and namespace, driven with
// curl. Per request, the prefill worker the frontend chose (its "[id] prefill worker X" debug
// line) is the one the decode worker called (its "[id] remote prefill: ... (prefill worker X)"
// line), and each prefill worker's /metrics counts exactly the prompt tokens of the requests
// chosen for it:
//   - round-robin: the frontend's turn also moves for the short prompts the decode worker
//     prefills itself, so its choices differ from what the decode worker's own round-robin would
//     pick (pa, pa, pb, pb against pa, pb, pa, pb for the four long prompts);
//   - kv: a prompt sharing a long prefix with an earlier one goes to the prefill worker that
//     cached that prefix (the prefill workers' KV events), each of three prefix families to one
//     worker, whatever the order.
#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <thread>
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
using testing::ChildProcess;
using testing::Curl;
using testing::Eventually;
using testing::HttpResult;
using testing::MetricValue;
using testing::ReadText;
using testing::ShellQuote;
using json = nlohmann::json;

HttpResult Get(const std::string& url) { return Curl(ShellQuote(url), 5); }

int CountOf(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size()))
    ++n;
  return n;
}

// request id -> prefill worker, from every match of `re` (group 1: id, group 2: worker).
std::map<std::string, std::string> Pairs(const std::string& log, const std::regex& re) {
  std::map<std::string, std::string> out;
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it) {
    out[(*it)[1].str()] = (*it)[2].str();
  }
  return out;
}

std::vector<int> Prompt(int n, int salt) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = 100 + (i * 37 + salt * 1009) % 5000;
  return v;
}

class PrefillChoiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = fs::temp_directory_path() / ("tandem-prefill-choice-" + std::to_string(getpid()) + "-" + test);
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "discovery");
    ns_ = "pchoice-" + std::to_string(getpid());
  }
  void TearDown() override {
    frontend_.reset();
    decode_.reset();
    prefill_.clear();
    if (HasFailure()) std::cerr << Logs();
    fs::remove_all(dir_);
  }
  std::vector<std::pair<std::string, std::string>> Env() const {
    return {{"TANDEM_DISCOVERY_DIR", (dir_ / "discovery").string()}, {"TANDEM_LOG_LEVEL", "debug"}};
  }
  std::string Logs() const {
    std::string out;
    for (const char* name : {"frontend.log", "decode.log", "prefill-pa.log", "prefill-pb.log"}) {
      std::string text = ReadText(dir_ / name);
      if (text.size() > 20000) text = "...\n" + text.substr(text.size() - 20000);
      out += std::string("---- ") + name + "\n" + text;
    }
    return out;
  }

  void Start(const std::string& router_mode) {
    const std::vector<std::string> common = {"--namespace", ns_, "--port", "0", "--device", "cpu",
                                             "--num-kv-blocks", "1024"};
    for (const std::string id : {"pa", "pb"}) {
      const int port = testing::FreePort();
      metrics_[id] = "http://127.0.0.1:" + std::to_string(port) + "/metrics";
      std::vector<std::string> argv = {TANDEM_BINARY, "worker", "--mode", "prefill",
                                       "--instance-id", id, "--metrics-port", std::to_string(port)};
      argv.insert(argv.end(), common.begin(), common.end());
      prefill_[id] = ChildProcess::Start(argv, Env(), (dir_ / ("prefill-" + id + ".log")).string());
      ASSERT_TRUE(prefill_[id]);
    }
    std::vector<std::string> argv = {TANDEM_BINARY, "worker", "--mode", "decode",
                                     "--max-local-prefill-tokens", "64"};
    argv.insert(argv.end(), common.begin(), common.end());
    decode_ = ChildProcess::Start(argv, Env(), (dir_ / "decode.log").string());
    ASSERT_TRUE(decode_);
    const int port = testing::FreePort();
    base_ = "http://127.0.0.1:" + std::to_string(port);
    frontend_ = ChildProcess::Start({TANDEM_BINARY, "frontend", "--port", std::to_string(port),
                                     "--namespace", ns_, "--request-timeout-s", "60",
                                     "--router-mode", router_mode},
                                    Env(), (dir_ / "frontend.log").string());
    ASSERT_TRUE(frontend_);
    ASSERT_TRUE(Eventually([&] { return Get(base_ + "/health").status == 200; }, 120s)) << Logs();
    for (const auto& [id, url] : metrics_) {
      ASSERT_TRUE(Eventually([&] { return Get(url).status == 200; }, 120s)) << id << "\n" << Logs();
    }
    ASSERT_TRUE(Eventually([&] {
      return ReadText(dir_ / "decode.log").find(" 2 prefill worker(s) available") != std::string::npos;
    }, 20s)) << Logs();
    ASSERT_TRUE(Eventually([&] {
      return ReadText(dir_ / "frontend.log").find("prefill router: 2 prefill worker(s)") !=
             std::string::npos;
    }, 20s)) << Logs();
  }

  // A completion of token ids (max 2 tokens, greedy); its status.
  int Complete(const std::vector<int>& prompt) {
    const json body = {{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}};
    HttpResult r = Curl("-H 'content-type: application/json' -d " + ShellQuote(body.dump()) + " " +
                            ShellQuote(base_ + "/v1/completions"),
                        120);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.status;
  }

  double PromptTokensOf(const std::string& id) {
    HttpResult r = Get(metrics_[id]);
    return r.status == 200 ? MetricValue(r.body, "tandem_prefix_cache_queries_total") : -1;
  }

  // Frontend choice == decode worker's call for every remote prefill; returns the decode side.
  std::map<std::string, std::string> CheckHintsHonoured(size_t want_remote) {
    std::map<std::string, std::string> called;
    EXPECT_TRUE(Eventually([&] {
      called = Pairs(ReadText(dir_ / "decode.log"),
                     std::regex(R"(\[([^\]\s]+)\] remote prefill: [^\n]*\(prefill worker (\w+)\))"));
      return called.size() >= want_remote;
    }, 10s)) << Logs();
    EXPECT_EQ(called.size(), want_remote);
    const auto chosen = Pairs(ReadText(dir_ / "frontend.log"),
                              std::regex(R"(\[([^\]\s]+)\] prefill worker (\w+) )"));
    for (const auto& [request, worker] : called) {
      auto it = chosen.find(request);
      if (it == chosen.end()) {
        ADD_FAILURE() << "the frontend chose no prefill worker for " << request;
        continue;
      }
      EXPECT_EQ(it->second, worker) << request;
    }
    EXPECT_EQ(CountOf(ReadText(dir_ / "decode.log"), "remote prefill failed"), 0);
    return called;
  }

  fs::path dir_;
  std::string ns_, base_;
  std::map<std::string, std::string> metrics_;
  std::map<std::string, std::unique_ptr<ChildProcess>> prefill_;
  std::unique_ptr<ChildProcess> decode_, frontend_;
};

TEST_F(PrefillChoiceTest, RoundRobinChoicesOfTheFrontendAreTheOnesCalled) {
  Start("round-robin");
  // long, short, long, long, short, long: the frontend's turn goes pa pb pa pb pa pb over all six;
  // the short ones (20 tokens <= 64) are prefilled on the decode worker.
  const std::vector<int> lengths = {200, 20, 230, 260, 20, 290};
  for (size_t i = 0; i < lengths.size(); ++i) {
    ASSERT_EQ(Complete(Prompt(lengths[i], static_cast<int>(i))), 200);
  }
  auto called = CheckHintsHonoured(4);
  std::vector<std::string> order;  // by request in submission order: the log's order
  const std::string decode_log = ReadText(dir_ / "decode.log");
  std::regex re(R"(\] remote prefill: [^\n]*\(prefill worker (\w+)\))");
  for (std::sregex_iterator it(decode_log.begin(), decode_log.end(), re), end; it != end; ++it) {
    order.push_back((*it)[1].str());
  }
  EXPECT_EQ(order, (std::vector<std::string>{"pa", "pa", "pb", "pb"}));
  // Each prefill worker computed the prompts chosen for it, and only those.
  EXPECT_TRUE(Eventually([&] { return PromptTokensOf("pa") == 200 + 230; }, 10s))
      << PromptTokensOf("pa");
  EXPECT_TRUE(Eventually([&] { return PromptTokensOf("pb") == 260 + 290; }, 10s))
      << PromptTokensOf("pb");
}

TEST_F(PrefillChoiceTest, KvModeSendsAPromptToThePrefillWorkerThatCachedItsPrefix) {
  Start("kv");
  // Three families; each member: the family's 320-token prefix + 100 tokens of its own, so the
  // decode worker (after the first member) lacks > 64 tokens and goes remote again.
  auto member = [](int family, int k) {
    std::vector<int> p = Prompt(320, 50 + family);
    std::vector<int> tail = Prompt(100, 500 + family * 10 + k);
    p.insert(p.end(), tail.begin(), tail.end());
    return p;
  };
  const std::vector<std::pair<int, int>> order = {{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1},
                                                  {2, 1}, {0, 2}, {1, 2}, {2, 2}};
  for (const auto& [family, k] : order) {
    ASSERT_EQ(Complete(member(family, k)), 200);
    // Let the prefill worker's KV events reach the frontend before the next member.
    std::this_thread::sleep_for(300ms);
  }
  CheckHintsHonoured(order.size());
  // The decode worker's calls, in order: each family's members on its first member's worker.
  std::vector<std::string> workers;
  const std::string decode_log = ReadText(dir_ / "decode.log");
  std::regex re(R"(\] remote prefill: [^\n]*\(prefill worker (\w+)\))");
  for (std::sregex_iterator it(decode_log.begin(), decode_log.end(), re), end; it != end; ++it) {
    workers.push_back((*it)[1].str());
  }
  ASSERT_EQ(workers.size(), order.size());
  for (size_t i = 3; i < order.size(); ++i) {
    EXPECT_EQ(workers[i], workers[i % 3]) << "family " << order[i].first << " member "
                                          << order[i].second;
  }
  // The prefill worker had the family's prefix cached for every later member.
  EXPECT_EQ(CountOf(decode_log, "prefill worker had 320 prompt tokens cached"), 6) << decode_log;
}

}  // namespace
}  // namespace tandem
