// The KV disk tier's filesystem faults at server level (issue 26's fault tests): `tandem run --mode
// agg` on the bundled tiny model (CPU) with a 24-block pool, a 21-block host tier and a disk tier,
// under a multi-turn workload (six sessions taking turns, each turn resending its session's history
// with the last answer and a new message) whose returning turns find their prefix evicted from
// the pool and the host tier, so that a working disk tier stores and fetches them. For each fault
// the server keeps serving (/health, every request 200), every greedy answer equals that of a
// server without any tier, the log says once that the tier is off or that writes fail (not a line
// a block), and /metrics counts no block as stored that is not on disk.
//
// The faults, and what they do not cover:
// - A read-only directory (chmod 0555, made here): the tier cannot create its slab and stays off.
//   Skipped as root (root ignores the mode).
// - A read-only filesystem: a tmpfs mounted read-only; the same, for root too.
// - A full disk at start: a tmpfs filled before the server starts; the slab cannot be given its
//   size (fallocate: ENOSPC) and the tier stays off.
// - A disk that fills while the server runs: the slab got its whole size at open, so the tier
//   keeps working (no write error) after the rest of the filesystem is filled.
// - Writes failing with ENOSPC mid-run: the slab's data pages are punched out (a sparse slab, as on
//   a filesystem that cannot preallocate) and the filesystem filled but for room for a few blocks;
//   the first writes land, the rest fail with the kernel's ENOSPC.
// The tmpfs is private to the server: it runs under `unshare -rm` (an unprivileged user and mount
// namespace; the test reaches the mount through /proc/<pid>/root). Where namespaces are not
// allowed those cases skip, saying so. Not covered: a directory or filesystem that becomes
// read-only while the server runs (the slab is open already: chmod does not reach an open file,
// and a filesystem with a file open for writing cannot be remounted read-only), and I/O errors
// other than ENOSPC (the tier's unit tests inject those: tests/unit/kvtier/disk_tier_test.cc).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <initializer_list>
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
using testing::ChildProcess;
using testing::Curl;
using testing::Eventually;
using testing::MetricValue;
using testing::SeededWords;
using testing::ShellQuote;

constexpr int kSessions = 6;
constexpr int kTurns = 4;
constexpr size_t kPage = 4096;
constexpr size_t kStride = 100 * 1024;  // a slab slot: a 4 KiB header and the tiny model's 96 KiB block

// One answer: its text and its tokens (completions logprobs); empty after a failed request.
struct Answer {
  std::string text;
  std::vector<std::string> tokens;
  bool operator==(const Answer&) const = default;
};

size_t CountLines(const std::string& log, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = log.find(needle); pos != std::string::npos; pos = log.find(needle, pos + 1)) ++n;
  return n;
}

class KvDiskFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tandem-kv-faults-it-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    server_.reset();  // its namespace, and the tmpfs in it, go with it
    std::error_code ec;
    fs::permissions(dir_ / "ro", fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }

  // Empty when this process may run a command in a new user and mount namespace and mount a
  // tmpfs there; else why not.
  std::string CannotMountTmpfs() {
    const fs::path probe = dir_ / "probe";
    fs::create_directories(probe);
    auto r = testing::RunCommand("unshare -rm sh -c " +
                                     ShellQuote("mount -t tmpfs -o size=64k tandem-probe " + probe.string()),
                                 30);
    if (r.exit_code == 0) return "";
    return "`unshare -rm` and `mount -t tmpfs` in it failed here (unprivileged user namespaces "
           "disabled, or no util-linux): exit " + std::to_string(r.exit_code) + ": " + r.err;
  }

  // tandem run --mode agg. tiers: a 0.002 GiB host tier (21 blocks) and a disk tier of disk_gib
  // in disk_dir. With tmpfs_kib > 0 the server runs in its own user and mount namespace, with a
  // tmpfs of that size on mnt() (read-only when tmpfs_ro; filled up before the server starts
  // when fill_first).
  void Start(bool tiers, const fs::path& disk_dir = {}, const std::string& disk_gib = "0.05",
             int tmpfs_kib = 0, bool tmpfs_ro = false, bool fill_first = false) {
    port_ = testing::FreePort();
    std::vector<std::string> argv;
    if (tmpfs_kib > 0) {
      fs::create_directories(mnt());
      std::string script = "mount -t tmpfs -o size=" + std::to_string(tmpfs_kib) + "k" +
                           (tmpfs_ro ? ",ro" : "") + " tandem-kv-test " + ShellQuote(mnt().string()) + " || exit 97; ";
      if (fill_first) script += "dd if=/dev/zero of=" + ShellQuote((mnt() / "filler").string()) + " bs=4k 2>/dev/null; ";
      script += "exec \"$@\"";
      argv = {"unshare", "-rm", "sh", "-c", script, "sh"};
    }
    auto add = [&](std::initializer_list<std::string> args) { argv.insert(argv.end(), args); };
    add({TANDEM_BINARY, "run", "--mode", "agg", "--host", "127.0.0.1", "--port", std::to_string(port_),
         "--num-kv-blocks", "24"});
    if (tiers) {
      add({"--kv-offload-host-gib", "0.002", "--kv-offload-disk-gib", disk_gib, "--kv-offload-disk-dir",
           disk_dir.string()});
    }
    log_ = dir_ / ("server" + std::to_string(++starts_) + ".log");
    server_ = ChildProcess::Start(argv, {}, log_.string());
    ASSERT_TRUE(server_);
    ASSERT_TRUE(Eventually([&] { return !server_->Running() || Get("/v1/models").status == 200; }, 60s))
        << Log();
    ASSERT_TRUE(server_->Running()) << "the server exited: " << Log();
  }
  void Stop() {
    server_->Signal(SIGTERM);
    ASSERT_TRUE(server_->WaitExit(30s)) << Log();
    server_.reset();
  }
  fs::path mnt() const { return dir_ / "mnt"; }
  // The server's view of `p` (inside its mount namespace).
  fs::path Inside(const fs::path& p) const {
    return fs::path("/proc") / std::to_string(server_->pid()) / "root" / p.relative_path();
  }
  std::string Log() const { return testing::ReadText(log_); }
  testing::HttpResult Get(const std::string& path) {
    return Curl(ShellQuote("http://127.0.0.1:" + std::to_string(port_) + path), 10);
  }
  double Metric(const std::string& name) { return MetricValue(Get("/metrics").body, name); }
  // The tiers' counters, on one line of the test's output (for reading a run).
  void PrintTierCounters() {
    const std::string body = Get("/metrics").body;
    std::string line = "tier counters:";
    for (const char* m : {"tandem_kv_offloaded_blocks_total", "tandem_kv_onboarded_blocks_total",
                          "tandem_kv_offload_disk_blocks", "tandem_kv_offload_disk_written_blocks_total",
                          "tandem_kv_offload_disk_write_errors_total", "tandem_kv_offload_disk_read_blocks_total",
                          "tandem_kv_offload_fetched_blocks_total", "tandem_kv_offload_disk_corrupt_total"}) {
      line += std::string(" ") + (m + 10) + "=" + std::to_string(static_cast<long long>(MetricValue(body, m)));
    }
    std::printf("%s\n", line.c_str());
  }

  // Greedy completion; a failure is a test failure (and an empty answer).
  Answer Complete(const std::string& prompt) {
    nlohmann::json body = {{"model", "tiny-qwen3"}, {"prompt", prompt}, {"max_tokens", 8},
                           {"temperature", 0},      {"logprobs", 0}};
    auto r = Curl("-H 'content-type: application/json' -d " + ShellQuote(body.dump()) + " " +
                      ShellQuote("http://127.0.0.1:" + std::to_string(port_) + "/v1/completions"),
                  60);
    EXPECT_EQ(r.status, 200) << r.body;
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (r.status != 200 || j.is_discarded() || !j.contains("choices")) return {};
    Answer a;
    a.text = j["choices"][0]["text"].get<std::string>();
    const auto& lp = j["choices"][0]["logprobs"];
    if (lp.is_object() && lp.contains("tokens")) {
      for (const auto& t : lp["tokens"]) a.tokens.push_back(t.get<std::string>());
    }
    return a;
  }

  // The multi-turn workload: turn after turn, every session sends its history (a 16-word opening,
  // then each answer and a 12-word message; 282 tokens at most, 19 blocks with the answer), so a
  // session's returning turn comes after the other five sessions' (50 to 90 blocks, more than the
  // pool and the host tier hold together). The answers in order; /health is checked between turns.
  std::vector<Answer> Workload() {
    std::vector<std::string> history(kSessions);
    std::vector<Answer> out;
    for (int t = 0; t < kTurns; ++t) {
      for (int s = 0; s < kSessions; ++s) {
        if (t == 0) history[s] = SeededWords(1000 + s, 16);
        history[s] += SeededWords(2000 + s * 10 + t, 12);
        out.push_back(Complete(history[s]));
        if (out.back().tokens.empty()) return out;  // failed (and reported)
        history[s] += out.back().text + " ";
      }
      auto h = Get("/health");
      EXPECT_EQ(h.status, 200) << h.body;
      EXPECT_NE(h.body.find("ok"), std::string::npos) << h.body;
    }
    return out;
  }

  // The workload's answers from a server without any tier.
  void Reference(std::vector<Answer>* want) {
    ASSERT_NO_FATAL_FAILURE(Start(false));
    *want = Workload();
    ASSERT_NO_FATAL_FAILURE(Stop());
    for (const Answer& a : *want) ASSERT_FALSE(a.tokens.empty());
  }

  // After a run whose disk tier stayed off: it says so once, the host tier worked, and no disk
  // metric is exported.
  void ExpectTierOff(const std::string& why) {
    const std::string log = Log();
    EXPECT_EQ(CountLines(log, "kv offload: no disk tier in"), 1u) << log;
    EXPECT_NE(log.find(why), std::string::npos) << log;
    EXPECT_GT(Metric("tandem_kv_offloaded_blocks_total"), 0);
    EXPECT_EQ(Metric("tandem_kv_offload_disk_capacity_blocks"), -1);
    EXPECT_EQ(Metric("tandem_kv_offload_disk_written_blocks_total"), -1);
  }

  fs::path dir_, log_;
  int port_ = 0, starts_ = 0;
  std::unique_ptr<ChildProcess> server_;
};

// The control: the workload does push blocks to the disk and fetch them back, with the same answers.
TEST_F(KvDiskFaultsTest, AWorkingDiskTierStoresAndFetchesTheWorkloadsBlocks) {
  std::vector<Answer> want;
  ASSERT_NO_FATAL_FAILURE(Reference(&want));
  ASSERT_NO_FATAL_FAILURE(Start(true, dir_ / "kv"));
  EXPECT_EQ(Workload(), want);
  PrintTierCounters();
  EXPECT_GT(Metric("tandem_kv_offload_disk_written_blocks_total"), 0) << Log();
  EXPECT_GT(Metric("tandem_kv_offload_fetched_blocks_total"), 0) << Log();
  EXPECT_EQ(Metric("tandem_kv_offload_disk_write_errors_total"), 0);
  EXPECT_EQ(Metric("tandem_kv_offload_disk_corrupt_total"), 0);
}

TEST_F(KvDiskFaultsTest, AReadOnlyDirectoryLeavesTheTierOffAndTheAnswersUnchanged) {
  if (geteuid() == 0) GTEST_SKIP() << "running as root, which ignores a directory's mode 0555";
  std::vector<Answer> want;
  ASSERT_NO_FATAL_FAILURE(Reference(&want));
  const fs::path ro = dir_ / "ro";
  fs::create_directories(ro);
  fs::permissions(ro, fs::perms(0555));
  ASSERT_NO_FATAL_FAILURE(Start(true, ro));
  EXPECT_EQ(Workload(), want);
  PrintTierCounters();
  ExpectTierOff("Permission denied");
  EXPECT_TRUE(fs::is_empty(ro));
}

TEST_F(KvDiskFaultsTest, AReadOnlyFilesystemLeavesTheTierOffAndTheAnswersUnchanged) {
  if (const std::string why = CannotMountTmpfs(); !why.empty()) GTEST_SKIP() << why;
  std::vector<Answer> want;
  ASSERT_NO_FATAL_FAILURE(Reference(&want));
  ASSERT_NO_FATAL_FAILURE(Start(true, mnt(), "0.05", 1024, /*tmpfs_ro=*/true));
  EXPECT_EQ(Workload(), want);
  PrintTierCounters();
  ExpectTierOff("Read-only file system");
}

TEST_F(KvDiskFaultsTest, AFullDiskAtStartLeavesTheTierOffAndTheAnswersUnchanged) {
  if (const std::string why = CannotMountTmpfs(); !why.empty()) GTEST_SKIP() << why;
  std::vector<Answer> want;
  ASSERT_NO_FATAL_FAILURE(Reference(&want));
  ASSERT_NO_FATAL_FAILURE(Start(true, mnt(), "0.05", 4096, false, /*fill_first=*/true));
  EXPECT_EQ(Workload(), want);
  PrintTierCounters();
  ExpectTierOff("No space left on device");
  // The failed reservation gave its space back: the slab is empty.
  std::error_code ec;
  EXPECT_EQ(fs::file_size(Inside(mnt() / "tandem-kv.slab"), ec), 0u) << ec.message();
}

// Fills `dir` (a path through /proc/<pid>/root) but for `leave` bytes. True when it got full.
bool FillBut(const fs::path& dir, size_t leave) {
  const fs::path keep = dir / "keep", filler = dir / "filler";
  const int kfd = ::open(keep.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int ffd = ::open(filler.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char> buf(64 * 1024, 'x');
  bool ok = kfd >= 0 && ffd >= 0;
  for (size_t n = 0; n < leave && ok; n += kPage) ok = ::write(kfd, buf.data(), kPage) == static_cast<ssize_t>(kPage);
  bool full = false;
  for (size_t chunk : {buf.size(), kPage}) {
    while (ok) {
      const ssize_t w = ::write(ffd, buf.data(), chunk);
      if (w < 0 && errno == ENOSPC) break;
      if (w <= 0) ok = false;
    }
    full = ok;
  }
  if (kfd >= 0) ::close(kfd);
  if (ffd >= 0) ::close(ffd);
  std::error_code ec;
  fs::remove(keep, ec);
  return full && ok && !ec;
}

TEST_F(KvDiskFaultsTest, ADiskThatFillsWhileServingLeavesThePreallocatedSlabWorking) {
  if (const std::string why = CannotMountTmpfs(); !why.empty()) GTEST_SKIP() << why;
  std::vector<Answer> want;
  ASSERT_NO_FATAL_FAILURE(Reference(&want));
  // A 52-block tier (5.2 MiB) on an 8 MiB tmpfs, the rest of it filled once the server is up.
  ASSERT_NO_FATAL_FAILURE(Start(true, mnt(), "0.005", 8192));
  EXPECT_NE(Log().find("kv offload: disk tier"), std::string::npos) << Log();
  ASSERT_TRUE(FillBut(Inside(mnt()), 0));
  struct statvfs st {};
  ASSERT_EQ(::statvfs(Inside(mnt()).c_str(), &st), 0);
  EXPECT_EQ(st.f_bavail, 0u);
  EXPECT_EQ(Workload(), want);
  PrintTierCounters();
  EXPECT_GT(Metric("tandem_kv_offload_disk_written_blocks_total"), 0) << Log();
  EXPECT_GT(Metric("tandem_kv_offload_fetched_blocks_total"), 0) << Log();
  EXPECT_EQ(Metric("tandem_kv_offload_disk_write_errors_total"), 0) << Log();
  EXPECT_EQ(Metric("tandem_kv_offload_disk_corrupt_total"), 0);
  EXPECT_EQ(CountLines(Log(), "writing a block failed"), 0u) << Log();
}

TEST_F(KvDiskFaultsTest, WritesFailingWithENOSPCMidRunAreCountedLoggedOnceAndNeverServed) {
  if (const std::string why = CannotMountTmpfs(); !why.empty()) GTEST_SKIP() << why;
  std::vector<Answer> want;
  ASSERT_NO_FATAL_FAILURE(Reference(&want));
  ASSERT_NO_FATAL_FAILURE(Start(true, mnt(), "0.005", 8192));
  // Before any block is written: the slab's data pages punched out (its header page stays), and
  // the filesystem filled but for room for 6 slots. The first writes land, then ENOSPC on the slots
  // the disk cannot back.
  const fs::path slab = Inside(mnt() / "tandem-kv.slab");
  {
    const int fd = ::open(slab.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << slab << ": " << std::strerror(errno);
    const off_t size = ::lseek(fd, 0, SEEK_END);
    ASSERT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, kPage, size - kPage), 0)
        << std::strerror(errno);
    ::close(fd);
  }
  ASSERT_TRUE(FillBut(Inside(mnt()), 6 * kStride));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(Workload(), want);
  PrintTierCounters();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const double written = Metric("tandem_kv_offload_disk_written_blocks_total");
  const double errors = Metric("tandem_kv_offload_disk_write_errors_total");
  EXPECT_GT(written, 0) << Log();
  EXPECT_GT(errors, 0) << Log();
  // At most the 6 slots the disk could back hold blocks (the gauge); they keep taking writes,
  // evicting their older blocks, while a slot whose write failed is tried only when no written
  // block is left to evict. Only what was written was read back, intact.
  const double on_disk = Metric("tandem_kv_offload_disk_blocks");
  EXPECT_GT(on_disk, 0) << Log();
  EXPECT_LE(on_disk, 6) << Log();
  EXPECT_LE(on_disk, written);
  EXPECT_EQ(Metric("tandem_kv_offload_disk_corrupt_total"), 0);
  EXPECT_EQ(Metric("tandem_kv_offload_disk_read_blocks_total"), Metric("tandem_kv_offload_fetched_blocks_total"));
  // One line per 10 s at most (the tier's log limiter), however many writes failed.
  const std::string log = Log();
  const size_t lines = CountLines(log, "writing a block failed: No space left on device");
  EXPECT_GE(lines, 1u) << log;
  EXPECT_LE(lines, 1 + static_cast<size_t>(seconds / 10)) << log;
  EXPECT_EQ(CountLines(log, "writing a block failed"), lines) << log;
  // And the server still serves a fresh request.
  EXPECT_FALSE(Complete(SeededWords(9999, 20)).tokens.empty());
}

}  // namespace
}  // namespace tandem
