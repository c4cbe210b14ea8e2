// The RMA backends (ucx, libfabric; tcp beside them where the scenario applies) between processes
// and with a peer that disappears mid-transfer: killed (SIGKILL) while running or stopped, stalled
// (SIGSTOP) past the deadline, or destroyed in this process. The handle must end in kError within
// the agent's timeout, never hang.
//
// The child is this test binary run again (fork + exec of /proc/self/exe with TANDEM_RMA_CHILD set):
// a fresh process, as a forked copy of one that already ran UCX or libfabric would not be. A static
// initializer below runs the child before gtest starts. Parent and child talk through pipes: the
// child writes its metadata, then answers "wait" (the first notification and its buffer's checksum)
// and exits on "quit" or EOF.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "transfer_test_util.h"

namespace tandem::transfer {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::Checksum;
using testing::ExpectQueuedWriteTimesOut;
using testing::FillRandom;
using testing::WaitEnd;

constexpr int kChildIn = 3, kChildOut = 4;  // the child's pipe ends after exec

bool WriteMsg(int fd, const std::string& s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  std::string buf(reinterpret_cast<char*>(&n), 4);
  buf += s;
  for (size_t off = 0; off < buf.size();) {
    ssize_t w = ::write(fd, buf.data() + off, buf.size() - off);
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

std::optional<std::string> ReadMsg(int fd) {
  auto read_all = [fd](char* p, size_t n) {
    while (n > 0) {
      ssize_t r = ::read(fd, p, n);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  };
  uint32_t n = 0;
  if (!read_all(reinterpret_cast<char*>(&n), 4)) return std::nullopt;
  std::string s(n, '\0');
  if (!read_all(s.data(), n)) return std::nullopt;
  return s;
}

// TANDEM_RMA_CHILD = "<backend> <name> <size> <seed>".
[[noreturn]] void ChildMain(const char* spec) {
  char backend[64] = {}, name[64] = {};
  unsigned long long size = 0, seed = 0;
  if (std::sscanf(spec, "%63s %63s %llu %llu", backend, name, &size, &seed) != 4) _exit(2);
  AgentOptions o;
  o.name = name;
  o.backends = {backend};
  auto agent = Agent::Create(o);
  if (!agent.ok()) {
    std::fprintf(stderr, "rma child: %s\n", agent.status().ToString().c_str());
    _exit(3);
  }
  std::vector<uint8_t> buf(size);
  FillRandom(buf, seed);
  auto reg = (*agent)->RegisterMemory(buf.data(), buf.size());
  if (!reg.ok() || !WriteMsg(kChildOut, (*agent)->ExportMetadata())) _exit(4);
  for (;;) {
    auto cmd = ReadMsg(kChildIn);
    if (!cmd || *cmd == "quit") {  // the agent shuts down first: its threads are joined
      reg->Reset();
      agent->reset();
      _exit(0);
    }
    if (*cmd == "wait") {
      std::string message = "(none)";
      for (auto until = Clock::now() + 10s; Clock::now() < until;) {
        auto notes = (*agent)->GetNotifications();
        if (!notes.empty()) {
          message = notes[0].peer + "/" + notes[0].message;
          break;
        }
        std::this_thread::sleep_for(1ms);
      }
      WriteMsg(kChildOut, message + " " + std::to_string(Checksum(buf.data(), buf.size())));
    }
  }
}

// True once one of the first 64 bytes at `p` is not 0 (data has started to land there), within `max`.
// The backend's thread writes there meanwhile: the bytes are read through /proc/self/mem (a copy
// the kernel makes), as reading them here would race that thread (TSan reported it).
bool DataArrived(const uint8_t* p, std::chrono::milliseconds max = 10s) {
  int fd = ::open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool arrived = false;
  for (auto until = Clock::now() + max; !arrived && Clock::now() < until; std::this_thread::sleep_for(500us)) {
    uint8_t seen[64];
    if (::pread(fd, seen, sizeof(seen), static_cast<off_t>(reinterpret_cast<uintptr_t>(p))) != sizeof(seen)) break;
    for (uint8_t b : seen) arrived |= b != 0;
  }
  ::close(fd);
  return arrived;
}

const bool kChildHook = [] {
  if (const char* spec = std::getenv("TANDEM_RMA_CHILD")) ChildMain(spec);
  return true;
}();

struct Child {
  pid_t pid = -1;
  int to = -1, from = -1;
  std::string metadata;

  static Child Spawn(const std::string& backend, const std::string& name, uint64_t size, uint64_t seed) {
    int down[2], up[2];
    EXPECT_EQ(::pipe(down), 0);
    EXPECT_EQ(::pipe(up), 0);
    std::string spec = fmt::format("TANDEM_RMA_CHILD={} {} {} {}", backend, name, size, seed);
    Child c;
    c.pid = ::fork();
    if (c.pid == 0) {
      ::dup2(down[0], kChildIn);
      ::dup2(up[1], kChildOut);
      ::close_range(kChildOut + 1, ~0u, 0);
      char* argv[] = {const_cast<char*>("rma_child"), nullptr};
      char* envp[] = {spec.data(), nullptr};
      ::execve("/proc/self/exe", argv, envp);
      _exit(127);
    }
    ::close(down[0]);
    ::close(up[1]);
    ::fcntl(down[1], F_SETFD, FD_CLOEXEC);
    ::fcntl(up[0], F_SETFD, FD_CLOEXEC);
    c.to = down[1];
    c.from = up[0];
    return c;
  }
  bool ReadMetadata() {
    auto md = ReadMsg(from);
    if (md) metadata = *md;
    return md.has_value();
  }
  uint64_t RemoteAddr() const { return DecodeMetadata(metadata)->regions.at(0).addr; }
  std::string Ask(const std::string& cmd) {
    if (!WriteMsg(to, cmd)) return "";
    return ReadMsg(from).value_or("");
  }
  void Kill() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGCONT);
      WriteMsg(to, "quit");
      int status = 0;
      for (int i = 0; i < 300 && ::waitpid(pid, &status, WNOHANG) == 0; ++i) std::this_thread::sleep_for(10ms);
      Kill();
    }
    if (to >= 0) ::close(to);
    if (from >= 0) ::close(from);
  }
};

std::vector<std::string> RmaBackends() {
  std::vector<std::string> v;
#ifdef TANDEM_HAVE_UCX
  v.push_back("ucx");
#endif
#ifdef TANDEM_HAVE_LIBFABRIC
  v.push_back("libfabric");
#endif
  return v;
}

class RmaProcessTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    AgentOptions probe;
    probe.name = "probe";
    probe.backends = {GetParam()};
    auto usable = Agent::Create(probe);
    if (!usable.ok() && usable.status().code() == StatusCode::kFailedPrecondition) {
      GTEST_SKIP() << GetParam() << " backend unusable here: " << usable.status().ToString();
    }
    ASSERT_TRUE(usable.ok()) << usable.status().ToString();
  }
  std::unique_ptr<Agent> Make(const std::string& name, std::chrono::milliseconds timeout = 30s) {
    return testing::MakeAgent(name, {GetParam()}, {}, "", timeout);
  }
  // A small WRITE, so that the connection exists before the scenario starts (`remote`: a page the
  // scenario does not look at).
  static void Warm(Agent& agent, const std::string& peer, const void* src, uint64_t remote) {
    DescList l, r;
    l.Add(src, 4096);
    r.Add(remote, 4096);
    auto h = agent.Post(Op::kWrite, l, r, peer);
    ASSERT_TRUE(h.ok());
    ASSERT_EQ(WaitEnd(*h), TransferState::kDone) << h->status().ToString();
  }
};

TEST_P(RmaProcessTest, WriteAndReadAcrossProcesses) {
  constexpr uint64_t kSize = 16 << 20;
  Child child = Child::Spawn(GetParam(), "decode-child", kSize, 77);
  ASSERT_TRUE(child.ReadMetadata());
  auto agent = Make("prefill-parent");
  std::vector<uint8_t> src(kSize), back(kSize, 0);
  FillRandom(src, 5);
  auto rs = std::move(agent->RegisterMemory(src.data(), src.size()).value());
  auto rb = std::move(agent->RegisterMemory(back.data(), back.size()).value());
  auto peer = agent->LoadPeerMetadata(child.metadata);
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();
  EXPECT_EQ(agent->BackendFor(*peer).value(), GetParam());
  uint64_t remote = child.RemoteAddr();
  DescList l, r;
  l.Add(back.data(), kSize);
  r.Add(remote, kSize);
  auto rd = agent->Post(Op::kRead, l, r, *peer);
  ASSERT_TRUE(rd.ok());
  ASSERT_EQ(WaitEnd(*rd), TransferState::kDone) << rd->status().ToString();
  std::vector<uint8_t> expected(kSize);
  FillRandom(expected, 77);
  EXPECT_EQ(Checksum(back.data(), kSize), Checksum(expected.data(), kSize));

  DescList wl, wr;
  for (uint64_t off = 0; off < kSize; off += kSize / 64) {  // 64 descriptors, one region
    wl.Add(src.data() + off, kSize / 64);
    wr.Add(remote + off, kSize / 64);
  }
  auto w = agent->Post(Op::kWrite, wl, wr, *peer, "done:7");
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(WaitEnd(*w), TransferState::kDone) << w->status().ToString();
  EXPECT_EQ(w->num_regions(), 1u);
  EXPECT_EQ(child.Ask("wait"), "prefill-parent/done:7 " + std::to_string(Checksum(src.data(), kSize)));
}

// A stopped child cannot answer: a transfer stays in flight; one with a short timeout ends at its
// deadline; killing the child ends the other in an error, by the agent's timeout at the latest (ucx
// notices the closed connection at once; libfabric's tcp;ofi_rxm reports a dead peer only to an
// operation in flight to it, and while the child was stopped even a kPing could not be posted, so
// there the deadline ends it); a restarted peer (same name) then works.
TEST_P(RmaProcessTest, PeerStoppedThenKilledEndsInAnError) {
  constexpr uint64_t kSize = 64 << 20;
  Child first = Child::Spawn(GetParam(), "decode-x", kSize, 1);
  Child second = Child::Spawn(GetParam(), "decode-x", kSize, 2);
  ASSERT_TRUE(first.ReadMetadata());
  ASSERT_TRUE(second.ReadMetadata());
  constexpr auto kTimeout = 4s;
  auto agent = Make("prefill-y", kTimeout);
  std::vector<uint8_t> src(kSize);
  FillRandom(src, 9);
  auto rs = std::move(agent->RegisterMemory(src.data(), src.size()).value());
  ASSERT_TRUE(agent->LoadPeerMetadata(first.metadata).ok());
  DescList l, r;
  l.Add(src.data(), kSize);
  r.Add(first.RemoteAddr(), kSize);
  Warm(*agent, "decode-x", src.data(), first.RemoteAddr());  // a stopped peer would stall the set-up too
  ASSERT_EQ(::kill(first.pid, SIGSTOP), 0);
  auto posted = Clock::now();
  auto h = agent->Post(Op::kWrite, l, r, "decode-x", "never");
  ASSERT_TRUE(h.ok());
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(h->Check(), TransferState::kInProgress);
  ExpectQueuedWriteTimesOut(*agent, l, r, "decode-x");
  auto t0 = Clock::now();
  first.Kill();
  EXPECT_EQ(WaitEnd(*h, 10s), TransferState::kError);
  EXPECT_LT(Clock::now() - posted, kTimeout + 1s) << h->status().ToString();
  if (GetParam() == "ucx") {
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0) << h->status().ToString();
  }

  auto peer = agent->LoadPeerMetadata(second.metadata);
  ASSERT_TRUE(peer.ok());
  DescList r2;
  r2.Add(second.RemoteAddr(), kSize);
  auto h3 = agent->Post(Op::kWrite, l, r2, "decode-x", "again");
  ASSERT_TRUE(h3.ok());
  ASSERT_EQ(WaitEnd(*h3), TransferState::kDone) << h3->status().ToString();
  EXPECT_EQ(second.Ask("wait"), "prefill-y/again " + std::to_string(Checksum(src.data(), kSize)));
  TransferStats s = agent->stats();
  EXPECT_EQ(s.num_transfers, 2u);
  EXPECT_EQ(s.num_errors, 2u);
}

// The child is killed while a large WRITE streams into it: the operations in flight fail.
TEST_P(RmaProcessTest, PeerKilledWhileWriting) {
  constexpr uint64_t kSize = 256 << 20;
  Child child = Child::Spawn(GetParam(), "decode-w", kSize, 1);
  ASSERT_TRUE(child.ReadMetadata());
  auto agent = Make("prefill-w");
  std::vector<uint8_t> src(kSize, 7);
  auto rs = std::move(agent->RegisterMemory(src.data(), src.size()).value());
  ASSERT_TRUE(agent->LoadPeerMetadata(child.metadata).ok());
  Warm(*agent, "decode-w", src.data(), child.RemoteAddr() + kSize - 4096);
  DescList l, r;
  l.Add(src.data(), kSize);
  r.Add(child.RemoteAddr(), kSize);
  // Kill while the WRITE is in flight. How long 256 MiB takes depends on the machine (under 60 ms
  // on some), so each try waits less: a write that already ended is posted again, up to 6 times.
  TransferHandle h;
  auto wait = 40ms;
  for (int attempt = 0; attempt < 6; ++attempt, wait /= 2) {
    auto posted = agent->Post(Op::kWrite, l, r, "decode-w", "write-" + std::to_string(attempt));
    ASSERT_TRUE(posted.ok());
    h = std::move(posted).value();
    std::this_thread::sleep_for(wait);  // granted (a round trip after the warm-up), data moving
    if (h.Check() == TransferState::kInProgress) break;
  }
  ASSERT_EQ(h.Check(), TransferState::kInProgress) << "every write ended before the kill; make it larger";
  auto t0 = Clock::now();
  child.Kill();
  EXPECT_EQ(WaitEnd(h, 10s), TransferState::kError);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 3.0) << h.status().ToString();
}

// The child is killed while a large READ streams from it (its first bytes have landed here). ucx
// fails the gets in flight at once. libfabric pushes READs (the child writes into us), so this
// agent has no operation in flight to fail, and tcp;ofi_rxm answers later sends to the dead peer
// with -FI_EAGAIN instead of an error: the deadline ends the transfer (and closes the endpoint,
// so nothing lands afterwards).
TEST_P(RmaProcessTest, PeerKilledWhileReading) {
  constexpr uint64_t kSize = 256 << 20;
  constexpr auto kTimeout = 4s;
  Child child = Child::Spawn(GetParam(), "decode-z", kSize, 1);
  ASSERT_TRUE(child.ReadMetadata());
  auto agent = Make("prefill-z", kTimeout);
  std::vector<uint8_t> dst(kSize, 0);
  auto rd = std::move(agent->RegisterMemory(dst.data(), dst.size()).value());
  ASSERT_TRUE(agent->LoadPeerMetadata(child.metadata).ok());
  Warm(*agent, "decode-z", dst.data(), child.RemoteAddr() + kSize - 4096);
  DescList l, r;
  l.Add(dst.data(), kSize);
  r.Add(child.RemoteAddr(), kSize);
  auto posted = Clock::now();
  auto h = agent->Post(Op::kRead, l, r, "decode-z", "read-done");
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(DataArrived(dst.data()));
  ASSERT_EQ(h->Check(), TransferState::kInProgress) << "the transfer ended before the kill; make it larger";
  auto t0 = Clock::now();
  child.Kill();
  EXPECT_EQ(WaitEnd(*h, 10s), TransferState::kError);
  EXPECT_LT(Clock::now() - posted, kTimeout + 1s) << h->status().ToString();
  if (GetParam() == "ucx") {
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0) << h->status().ToString();
  }
  EXPECT_FALSE(h->status().ok());
}

// The child stops while a large READ streams from it: the transfer ends at its deadline (the
// backend cancels what is in flight: no byte lands afterwards); once the child runs again,
// transfers to it work again.
TEST_P(RmaProcessTest, PeerStalledDuringDataTimesOutThenRecovers) {
  constexpr uint64_t kSize = 256 << 20;
  Child child = Child::Spawn(GetParam(), "decode-s", kSize, 1);
  ASSERT_TRUE(child.ReadMetadata());
  constexpr auto kTimeout = 2s;
  auto agent = Make("prefill-s", kTimeout);
  std::vector<uint8_t> src(kSize, 0);
  auto rs = std::move(agent->RegisterMemory(src.data(), src.size()).value());
  ASSERT_TRUE(agent->LoadPeerMetadata(child.metadata).ok());
  Warm(*agent, "decode-s", src.data(), child.RemoteAddr() + kSize - 4096);
  DescList l, r;
  l.Add(src.data(), kSize);
  r.Add(child.RemoteAddr(), kSize);
  auto t0 = Clock::now();
  auto h = agent->Post(Op::kRead, l, r, "decode-s");
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(DataArrived(src.data()));
  ASSERT_EQ(::kill(child.pid, SIGSTOP), 0);
  ASSERT_EQ(h->Check(), TransferState::kInProgress) << "the transfer ended before the stop; make it larger";
  EXPECT_EQ(WaitEnd(*h, 10s), TransferState::kError);
  double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(waited, 1.9);
  EXPECT_LT(waited, 3.5);
  EXPECT_NE(h->status().message().find("timed out"), std::string::npos) << h->status().ToString();
  uint64_t sum = Checksum(src.data(), kSize);
  ASSERT_EQ(::kill(child.pid, SIGCONT), 0);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(sum, Checksum(src.data(), kSize)) << "bytes landed after the handle ended";
  DescList l1, r1;
  l1.Add(src.data(), 1 << 20);
  r1.Add(child.RemoteAddr(), 1 << 20);
  auto h2 = agent->Post(Op::kWrite, l1, r1, "decode-s", "after");
  ASSERT_TRUE(h2.ok());
  ASSERT_EQ(WaitEnd(*h2), TransferState::kDone) << h2->status().ToString();
  EXPECT_EQ(child.Ask("wait").substr(0, 16), "prefill-s/after ");
}

// The target agent is destroyed (in this process) while a large WRITE streams into it.
TEST_P(RmaProcessTest, PeerAgentDestroyedMidTransfer) {
  constexpr uint64_t kSize = 256 << 20;
  auto initiator = Make("prefill-d", 10s);
  auto target = Make("decode-d");
  std::vector<uint8_t> src(kSize, 3), dst(kSize, 0);
  auto rs = std::move(initiator->RegisterMemory(src.data(), src.size()).value());
  auto rd = std::move(target->RegisterMemory(dst.data(), dst.size()).value());
  ASSERT_TRUE(initiator->LoadPeerMetadata(target->ExportMetadata()).ok());
  Warm(*initiator, "decode-d", src.data(), reinterpret_cast<uint64_t>(dst.data()) + kSize - 4096);
  DescList l, r;
  l.Add(src.data(), kSize);
  r.Add(dst.data(), kSize);
  auto h = initiator->Post(Op::kWrite, l, r, "decode-d", "gone");
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(DataArrived(dst.data()));
  ASSERT_EQ(h->Check(), TransferState::kInProgress) << "the transfer ended before the peer went; make it larger";
  auto t0 = Clock::now();
  target.reset();  // its registration is left behind: deregistering would wait for the transfer
  EXPECT_EQ(WaitEnd(*h, 15s), TransferState::kError);
  double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(took, 3.0) << h->status().ToString();
  std::printf("[ %s ] destroyed peer: %s after %.3f s\n", GetParam().c_str(), h->status().ToString().c_str(), took);
}

INSTANTIATE_TEST_SUITE_P(Backends, RmaProcessTest, ::testing::ValuesIn(RmaBackends()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RmaProcessTest);

}  // namespace
}  // namespace tandem::transfer
