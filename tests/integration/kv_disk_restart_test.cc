// The KV disk tier across a killed server (issue 26's fault test): `tandem run --mode agg` with a
// small pool, a small host tier and a disk tier, under a load of distinct prompts that keeps blocks
// flowing to the disk, is SIGKILLed mid-run; a server restarted on the same directory keeps serving,
// recovers what was completely written, and answers a returning prompt with the same greedy text as
// a server without any tier, whether its prefix came back from the disk or was recomputed.
#include <signal.h>

#include <filesystem>
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
using testing::MetricValue;
using testing::ShellQuote;

std::string Prompt(int seed) { return testing::SeededWords(seed, 70); }

class KvDiskRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tandem-kv-disk-it-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    server_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // tandem run --mode agg; with_tiers: a 0.002 GiB host tier and a 0.05 GiB disk tier in dir_/kv.
  void Start(bool with_tiers) {
    port_ = testing::FreePort();
    std::vector<std::string> argv = {TANDEM_BINARY, "run", "--mode", "agg", "--host", "127.0.0.1",
                                     "--port", std::to_string(port_), "--num-kv-blocks", "24"};
    if (with_tiers) {
      for (const char* a : {"--kv-offload-host-gib", "0.002", "--kv-offload-disk-gib", "0.05"}) argv.push_back(a);
      argv.push_back("--kv-offload-disk-dir");
      argv.push_back((dir_ / "kv").string());
    }
    server_ = ChildProcess::Start(argv, {}, (dir_ / "server.log").string());
    ASSERT_TRUE(server_);
    ASSERT_TRUE(Eventually([&] { return Get("/v1/models").status == 200; }, 60s)) << testing::ReadText(dir_ / "server.log");
  }
  testing::HttpResult Get(const std::string& path) {
    return Curl(ShellQuote("http://127.0.0.1:" + std::to_string(port_) + path), 10);
  }
  // Greedy completion of Prompt(seed): the text, or "" on a failure.
  std::string Complete(int seed, int timeout_s = 60) {
    nlohmann::json body = {{"model", "tiny-qwen3"}, {"prompt", Prompt(seed)}, {"max_tokens", 8},
                           {"temperature", 0}};
    auto r = Curl("-H 'content-type: application/json' -d " + ShellQuote(body.dump()) + " " +
                      ShellQuote("http://127.0.0.1:" + std::to_string(port_) + "/v1/completions"),
                  timeout_s);
    if (r.status != 200) return "";
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_discarded() || !j.contains("choices")) return "";
    return j["choices"][0]["text"].get<std::string>();
  }
  double Metric(const std::string& name) { return MetricValue(Get("/metrics").body, name); }

  fs::path dir_;
  int port_ = 0;
  std::unique_ptr<ChildProcess> server_;
};

TEST_F(KvDiskRestartTest, AServerKilledMidOffloadRestartsOnItsDiskTierAndAnswersTheSame) {
  // The reference: no tier at all.
  ASSERT_NO_FATAL_FAILURE(Start(false));
  const std::string want = Complete(1);
  ASSERT_FALSE(want.empty());
  server_->Signal(SIGTERM);
  ASSERT_TRUE(server_->WaitExit(30s));

  // Prompt 1, then distinct prompts from four clients at once: blocks flow pool -> host -> disk
  // the whole time; the server is killed while they run.
  ASSERT_NO_FATAL_FAILURE(Start(true));
  ASSERT_EQ(Complete(1), want);
  std::vector<std::thread> load;
  for (int c = 0; c < 4; ++c) {
    load.emplace_back([this, c] {
      for (int i = 0; i < 40; ++i) (void)Complete(100 + c * 40 + i, 20);
    });
  }
  ASSERT_TRUE(Eventually([&] { return Metric("tandem_kv_offload_disk_written_blocks_total") >= 20; }, 120s))
      << testing::ReadText(dir_ / "server.log");
  server_->Signal(SIGKILL);
  ASSERT_TRUE(server_->WaitExit(10s));
  for (auto& t : load) t.join();  // their requests failed with the server; none is checked

  // Restarted on the same directory: it serves, and prompt 1 gives the reference text.
  ASSERT_NO_FATAL_FAILURE(Start(true));
  EXPECT_GT(Metric("tandem_kv_offload_disk_blocks"), 0) << testing::ReadText(dir_ / "server.log");
  EXPECT_EQ(Complete(1), want);
  EXPECT_EQ(Complete(2).empty(), false);
  EXPECT_EQ(Metric("tandem_kv_offload_disk_write_errors_total"), 0);
  EXPECT_EQ(Metric("tandem_kv_blocks_used"), 0);
}

}  // namespace
}  // namespace tandem
