// `tandem bench` against `tandem run --mode agg` (the bundled tiny model on the CPU): a short closed
// loop run whose JSON report must be present and plausible.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "subprocess.h"

extern char** environ;

namespace tandem::testing {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "GET /health" on 127.0.0.1:port; the status code, or 0 when nothing answered.
int HealthStatus(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int status = 0;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[64] = {};
      if (read(fd, buf, sizeof buf - 1) > 12) status = std::atoi(buf + 9);  // "HTTP/1.1 200"
    }
  }
  close(fd);
  return status;
}

class Server {
 public:
  explicit Server(const std::string& log_path, const std::vector<std::string>& extra_args = {})
      : log_path_(log_path) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::vector<std::string> args = {TANDEM_BINARY, "run", "--mode", "agg", "--port", "0",
                                     "--kv-cache-gib", "0.25"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, TANDEM_BINARY, &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Server() { Stop(); }

  // Waits (bounded) for the port in the log and /health 200.
  int WaitReady(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
    int port = 0;
    while (pid_ > 0 && std::chrono::steady_clock::now() < deadline) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::smatch m;
      const std::string log = Slurp(log_path_);
      if (port == 0 && std::regex_search(log, m, listening)) port = std::stoi(m[1]);
      if (port > 0 && HealthStatus(port) == 200) return port;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return 0;
  }

  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  std::string log_path_;
  pid_t pid_ = -1;
};

// `tandem bench ARGS --output-json DIR/report.json --no-progress` against a fresh `tandem run`
// (stopped after); DIR = the test temp dir's `name`. exit_code -1 when the server did not start.
struct BenchRun {
  std::string dir, json_path;
  CommandResult result;
};
BenchRun RunBenchAgainstTandemRun(const std::string& name, const std::string& args,
                                  const std::vector<std::string>& server_args = {}) {
  BenchRun run;
  run.dir = ::testing::TempDir() + "/" + name;
  std::filesystem::create_directories(run.dir);
  Server server(run.dir + "/server.log", server_args);
  const int port = server.WaitReady(std::chrono::seconds(120));
  if (port <= 0) {
    run.result.exit_code = -1;
    run.result.err = Slurp(run.dir + "/server.log");
    return run;
  }
  run.json_path = run.dir + "/report.json";
  std::filesystem::remove(run.json_path);
  run.result = RunCommand(std::string(TANDEM_BINARY) + " bench --url http://127.0.0.1:" +
                              std::to_string(port) + " " + args + " --output-json " +
                              ShellQuote(run.json_path) + " --no-progress",
                          300);
  server.Stop();
  return run;
}

// The request records of the report's first run (bench's --output-json).
nlohmann::json FirstRunRequests(const BenchRun& run) {
  return nlohmann::json::parse(Slurp(run.json_path))["runs"][0]["requests"];
}

// A conversation's next turn resends this one's prompt and reply, plus a new user message.
void ExpectNextTurnHoldsThisOne(const nlohmann::json& turn, const nlohmann::json& next) {
  EXPECT_GT(next["prompt_tokens"].get<int>(), turn["prompt_tokens"].get<int>() + turn["completion_tokens"].get<int>())
      << turn.dump() << next.dump();
}

TEST(BenchSmoke, ClosedLoopAgainstTandemRun) {
  const std::string dir = ::testing::TempDir() + "/bench_smoke";
  BenchRun bench = RunBenchAgainstTandemRun(
      "bench_smoke", "--concurrency 4 --num-requests 12 --warmup 2 --input-len 32 --output-len 16"
                     " --slo ttft=60s --output-csv " + ShellQuote(dir + "/report.csv") +
                     " --output-svg " + ShellQuote(dir + "/svg"));
  const CommandResult& r = bench.result;
  const std::string& json_path = bench.json_path;
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("| c=4"), std::string::npos) << r.out;

  nlohmann::json report = nlohmann::json::parse(Slurp(json_path));
  ASSERT_EQ(report["runs"].size(), 1u);
  const auto& run = report["runs"][0];
  EXPECT_EQ(run["num_requests"], 12);
  EXPECT_EQ(run["num_errors"], 0) << run["errors"].dump();
  EXPECT_EQ(run["num_ok"], 12);
  EXPECT_GT(run["request_throughput"].get<double>(), 0);
  EXPECT_GT(run["output_throughput"].get<double>(), 0);
  EXPECT_EQ(run["total_output_tokens"], 12 * 16);
  EXPECT_EQ(run["output_len_mismatch"], 0);
  EXPECT_EQ(run["usage_missing"], 0);
  EXPECT_EQ(run["num_slo_met"], 12);
  for (const char* q : {"mean", "p50", "p90", "p99"}) {
    EXPECT_GT(run["ttft_ms"][q].get<double>(), 0) << q;
    EXPECT_LE(run["ttft_ms"][q].get<double>(), run["e2e_ms"][q].get<double>()) << q;
  }
  ASSERT_EQ(run["requests"].size(), 12u);
  for (const auto& req : run["requests"]) {
    EXPECT_TRUE(req["error"].is_null()) << req.dump();
    ASSERT_TRUE(req["ttft_ms"].is_number()) << req.dump();
    EXPECT_GT(req["ttft_ms"].get<double>(), 0);
    EXPECT_LE(req["ttft_ms"].get<double>(), req["e2e_ms"].get<double>());
    EXPECT_EQ(req["completion_tokens"], 16) << req.dump();
    EXPECT_EQ(req["completion_tokens"], req["expected_output_tokens"]);
    // Every token streamed as its own chunk, except where a chunk waited for the rest of a
    // UTF-8 character; never more chunks than tokens.
    EXPECT_LE(req["num_chunks"].get<int>(), req["completion_tokens"].get<int>());
    EXPECT_GE(req["num_chunks"].get<int>(), 1);
    // The prompt: 32 tokens from the vocabulary plus the chat template's own tokens.
    EXPECT_GE(req["prompt_tokens"].get<int>(), 32);
    EXPECT_LE(req["prompt_tokens"].get<int>(), 32 + 16);
  }
  EXPECT_TRUE(std::filesystem::exists(dir + "/report.csv"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/svg/latency_vs_throughput.svg"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/svg/ttft_hist_c4.svg"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/svg/itl_hist_c4.svg"));
}

// Multi-turn: each turn resends the conversation so far with the server's replies, and every
// record keeps its own reply (bench-offload.sh compares them between runs).
TEST(BenchSmoke, MultiTurnRecordsKeepEachTurnsReply) {
  BenchRun run = RunBenchAgainstTandemRun(
      "bench_smoke_turns", "--dataset synthetic --num-turns 3 --concurrency 2 --num-requests 6"
                           " --warmup 0 --input-len 24 --output-len 8 --seed 5");
  ASSERT_EQ(run.result.exit_code, 0) << run.result.out << run.result.err;
  const nlohmann::json requests = FirstRunRequests(run);
  ASSERT_EQ(requests.size(), 6u);
  std::map<std::pair<int, int>, nlohmann::json> by_turn;  // (item, turn) -> record
  for (const auto& req : requests) {
    EXPECT_TRUE(req["error"].is_null()) << req.dump();
    EXPECT_FALSE(req["output_text"].get<std::string>().empty()) << req.dump();
    by_turn[{req["item_id"].get<int>(), req["turn"].get<int>()}] = req;
  }
  int followed = 0;
  for (const auto& [key, req] : by_turn) {
    auto next = by_turn.find({key.first, key.second + 1});
    if (next == by_turn.end()) continue;
    ExpectNextTurnHoldsThisOne(req, next->second);
    ++followed;
  }
  EXPECT_EQ(followed, 4);  // 2 conversations x 3 turns
}

// --sessions-per-client: one client keeps 3 conversations open and sends one turn of each in turn,
// so the requests go out as turn 0 of a, b, c, then turn 1 of a, b, c, each turn resending its own
// conversation's history.
TEST(BenchSmoke, SessionsPerClientInterleaveTheConversationsTurns) {
  BenchRun run = RunBenchAgainstTandemRun(
      "bench_smoke_sessions", "--dataset synthetic --num-turns 2 --concurrency 1 --sessions-per-client 3"
                              " --num-requests 6 --warmup 0 --input-len 24 --output-len 8 --seed 5");
  ASSERT_EQ(run.result.exit_code, 0) << run.result.out << run.result.err;
  const nlohmann::json records = FirstRunRequests(run);
  std::vector<nlohmann::json> requests(records.begin(), records.end());
  ASSERT_EQ(requests.size(), 6u);
  std::sort(requests.begin(), requests.end(), [](const nlohmann::json& x, const nlohmann::json& y) {
    return x["start_s"].get<double>() < y["start_s"].get<double>();
  });
  std::vector<int> items, turns;
  for (const auto& req : requests) {
    EXPECT_TRUE(req["error"].is_null()) << req.dump();
    items.push_back(req["item_id"].get<int>());
    turns.push_back(req["turn"].get<int>());
  }
  EXPECT_EQ(turns, (std::vector<int>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(std::set<int>(items.begin(), items.begin() + 3).size(), 3u);
  EXPECT_EQ(std::vector<int>(items.begin() + 3, items.end()), std::vector<int>(items.begin(), items.begin() + 3));
  for (int i = 0; i < 3; ++i) ExpectNextTurnHoldsThisOne(requests[i], requests[i + 3]);
}

// The model's generation_config.json max_new_tokens caps every request's max_tokens (vLLM takes
// the smallest of the request's, the context left and the model's): tandem bench asks for 8 tokens
// with ignore_eos and gets 3.
TEST(BenchSmoke, TheModelsMaxNewTokensCapsEveryRequest) {
  const std::filesystem::path model = ::testing::TempDir() + "/bench_smoke_max_new_tokens_model";
  std::filesystem::remove_all(model);
  std::filesystem::create_directories(model);
  const std::filesystem::path src = DefaultModelDir();
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"}) {
    std::filesystem::create_symlink(src / f, model / f);
  }
  std::ofstream(model / "generation_config.json") << R"({"eos_token_id": 151645, "max_new_tokens": 3})";
  BenchRun run = RunBenchAgainstTandemRun("bench_smoke_max_new_tokens",
                                          "--concurrency 1 --num-requests 2 --warmup 0 --input-len 16 --output-len 8",
                                          {"--model", model.string()});
  ASSERT_EQ(run.result.exit_code, 0) << run.result.out << run.result.err;
  const nlohmann::json requests = FirstRunRequests(run);
  ASSERT_EQ(requests.size(), 2u);
  for (const auto& req : requests) {
    EXPECT_EQ(req["completion_tokens"], 3) << req.dump();
    EXPECT_EQ(req["expected_output_tokens"], 8) << req.dump();
  }
  std::filesystem::remove_all(model);
}

}  // namespace
}  // namespace tandem::testing
