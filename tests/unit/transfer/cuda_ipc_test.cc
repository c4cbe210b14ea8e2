// The cuda_ipc backend on the fake device (fake_device.h, fake_ipc.cc): what the shared
// device-memory suite does not show. In one process: handles opened once per peer and region and
// closed when the peer goes, a failing open, the target going away mid-transfer. Across processes
// (fork; the child's memory is shared memory the parent maps through the handle): WRITE and READ,
// the notification only after the data, a bad range, a stalled peer and the deadline, a peer
// killed mid-transfer.
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "fake_device.h"
#include "pipe_msg.h"
#include "transfer/cuda_ipc_backend.h"
#include "transfer/cuda_ipc_control.h"
#include "transfer/metadata.h"
#include "transfer_test_util.h"

namespace tandem::transfer {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::Checksum;
using testing::DeviceBuffer;
using testing::FakeDevice;
using testing::FillRandom;
using testing::ReadMsg;
using testing::UnlinkSegmentsOf;
using testing::WaitEnd;
using testing::WriteMsg;

std::unique_ptr<Agent> IpcAgent(const std::string& name, const std::shared_ptr<FakeDevice>& dev,
                                std::chrono::milliseconds timeout = 30s, BackendParams params = {}) {
  RegisterBackendFactory("cuda_ipc", MakeCudaIpcBackendFactory(dev->ipc()));
  AgentOptions o;
  o.name = name;
  o.backends = {"cuda_ipc"};
  o.timeout = timeout;
  o.backend_params["cuda_ipc"] = std::move(params);
  auto a = Agent::Create(o);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return a.ok() ? std::move(a).value() : nullptr;
}

DescList Dev(uint64_t addr, uint64_t len, int32_t device) {
  DescList l;
  l.kind = MemoryKind::kDevice;
  l.Add(addr, len, device);
  return l;
}

class CudaIpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = std::make_shared<FakeDevice>();
    src_ = dev_->Alloc(1, kSize);
    dst_ = dev_->Alloc(2, kSize);
    std::vector<uint8_t> p(kSize);
    FillRandom(p, 3);
    std::memcpy(dev_->Alias(1, src_.addr(), kSize), p.data(), kSize);
    pattern_ = p;
    a_ = IpcAgent("a", dev_);
    b_ = IpcAgent("b", dev_);
    ra_ = std::move(a_->RegisterMemory(src_.ptr(), kSize, MemoryKind::kDevice, 1).value());
    rb_ = std::move(b_->RegisterMemory(dst_.ptr(), kSize, MemoryKind::kDevice, 2).value());
    ASSERT_TRUE(a_->LoadPeerMetadata(b_->ExportMetadata()).ok());
  }
  void TearDown() override { EXPECT_EQ(dev_->violations(), ""); }
  Status Write(uint64_t len, std::optional<std::string> note = std::nullopt) {
    auto h = a_->Post(Op::kWrite, Dev(src_.addr(), len, 1), Dev(dst_.addr(), len, 2), "b", std::move(note));
    if (!h.ok()) return h.status();
    EXPECT_EQ(h->backend(), "cuda_ipc");
    (void)WaitEnd(*h);
    return h->status();
  }
  bool Landed(uint64_t len) { return std::memcmp(dev_->Alias(2, dst_.addr(), len), pattern_.data(), len) == 0; }

  static constexpr uint64_t kSize = 4 << 20;
  std::shared_ptr<FakeDevice> dev_;
  DeviceBuffer src_, dst_;
  std::vector<uint8_t> pattern_;
  std::unique_ptr<Agent> a_, b_;
  Registration ra_, rb_;
};

TEST_F(CudaIpcTest, HandlesOpenOncePerPeerAndRegionAndCloseWhenThePeerGoes) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Write(1 << 20).ok());
  EXPECT_TRUE(Landed(1 << 20));
  EXPECT_EQ(dev_->opens(), 1u);
  EXPECT_EQ(dev_->closes(), 0u);
  ASSERT_TRUE(a_->InvalidatePeer("b").ok());
  EXPECT_EQ(dev_->closes(), 1u);
  ASSERT_TRUE(a_->LoadPeerMetadata(b_->ExportMetadata()).ok());
  ASSERT_TRUE(Write(kSize).ok());
  EXPECT_TRUE(Landed(kSize));
  EXPECT_EQ(dev_->opens(), 2u);
  a_.reset();  // shutdown closes what is open
  EXPECT_EQ(dev_->closes(), 2u);
}

// sm_ctas_peer (the fixture's memory is on fake devices 1 and 2): the SMs copy, in one batch on
// one queue, except for a transfer posted while the GPU computes; by default (sm_ctas_peer 0) the
// copy engines between GPUs; a bad value is refused at creation.
TEST_F(CudaIpcTest, TheCopyKernelUnlessTheGpuComputes) {
  ASSERT_TRUE(Write(kSize).ok());
  EXPECT_EQ(dev_->sm_batches(), 0u);
  EXPECT_GE(dev_->engine_batches(), 1u);
  const uint64_t engine_before = dev_->engine_batches();
  a_ = IpcAgent("a", dev_, 30s, {{"sm_ctas_peer", "16"}, {"stream_split_bytes", "1024"}});
  ra_ = std::move(a_->RegisterMemory(src_.ptr(), kSize, MemoryKind::kDevice, 1).value());
  ASSERT_TRUE(a_->LoadPeerMetadata(b_->ExportMetadata()).ok());
  auto post = [&](bool while_computing) {
    PostOptions o;
    o.while_computing = while_computing;
    auto h = a_->Post(Op::kWrite, Dev(src_.addr(), kSize, 1), Dev(dst_.addr(), kSize, 2), "b", std::nullopt, o);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_EQ(WaitEnd(*h), TransferState::kDone) << h->status().ToString();
  };
  post(false);
  EXPECT_EQ(dev_->sm_batches(), 1u);  // one queue: not split over num_streams
  EXPECT_EQ(dev_->engine_batches(), engine_before);
  post(true);
  EXPECT_EQ(dev_->sm_batches(), 1u);
  EXPECT_EQ(dev_->engine_batches(), engine_before + 2);  // the copy engines, over two queues
  EXPECT_TRUE(Landed(kSize));
  EXPECT_FALSE(Agent::Create([&] {
                 AgentOptions o;
                 o.name = "bad";
                 o.backends = {"cuda_ipc"};
                 o.backend_params["cuda_ipc"] = {{"sm_ctas", "-1"}};
                 return o;
               }())
                   .ok());
}

TEST_F(CudaIpcTest, AFailingOpenIsAClearErrorThatReleasesTheTarget) {
  std::vector<Notification> notes;
  dev_->set_fail_opens(1);
  Status st = Write(1 << 20, "must not arrive");
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st.ToString();
  EXPECT_NE(st.message().find("cannot open peer b's CUDA IPC handle"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("injected open failure"), std::string::npos) << st.ToString();
  ASSERT_TRUE(Write(1 << 20, "ok").ok());
  EXPECT_TRUE(Landed(1 << 20));
  // END is not answered: the notification arrives shortly after the completion, and only the
  // successful transfer's (one connection: ENDs arrive in the order sent).
  std::vector<Notification> n;
  for (auto until = Clock::now() + 5s; n.empty() && Clock::now() < until; std::this_thread::sleep_for(200us)) {
    n = b_->GetNotifications();
  }
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].peer, "a");
  EXPECT_EQ(n[0].message, "ok");
  // The target's pins were released (END after the failure, and after the success): its
  // registration goes away at once.
  auto t0 = Clock::now();
  rb_.Reset();
  EXPECT_LT(Clock::now() - t0, 1s);
}

TEST_F(CudaIpcTest, TheTargetGoingAwayMidTransferIsAnError) {
  dev_->set_copy_delay(300ms);
  auto h = a_->Post(Op::kWrite, Dev(src_.addr(), kSize, 1), Dev(dst_.addr(), kSize, 2), "b", "never");
  ASSERT_TRUE(h.ok());
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(h->Check(), TransferState::kInProgress);
  b_.reset();  // its control socket closes
  EXPECT_EQ(WaitEnd(*h, 5s), TransferState::kError);
  EXPECT_EQ(h->status().code(), StatusCode::kNotFound) << h->status().ToString();
  EXPECT_NE(h->status().message().find("gone"), std::string::npos) << h->status().ToString();
  dev_->set_copy_delay(0ms);
  Status again = Write(4096);
  EXPECT_EQ(again.code(), StatusCode::kNotFound) << again.ToString();  // nothing listens any more
}

// The control protocol carries its version in the magic: a hello of the first protocol (END
// answered) is refused (the connection closes unanswered), one of this protocol is answered.
TEST_F(CudaIpcTest, APeerOfTheFirstControlProtocolIsRefused) {
  auto md = DecodeMetadata(b_->ExportMetadata());
  ASSERT_TRUE(md.ok());
  const std::string name = md->backends.at("cuda_ipc");
  ASSERT_EQ(name[0], '@');
  auto hello = [&](uint32_t magic) -> int {  // the answer's type, or -1 when the socket closed unanswered
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + 1, name.data() + 1, name.size() - 1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), offsetof(sockaddr_un, sun_path) + name.size()), 0);
    ipc::MsgHeader h;
    h.magic = magic;
    h.type = ipc::MsgType::kHello;
    const std::string aux = "probe\n" + md->instance_id;
    h.aux_len = static_cast<uint32_t>(aux.size());
    std::string msg(reinterpret_cast<const char*>(&h), sizeof(h));
    msg += aux;
    EXPECT_EQ(::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL), static_cast<ssize_t>(msg.size()));
    ipc::MsgHeader r;
    const ssize_t n = ::recv(fd, &r, sizeof(r), MSG_WAITALL);
    ::close(fd);
    return n == static_cast<ssize_t>(sizeof(r)) ? static_cast<int>(r.type) : -1;
  };
  EXPECT_EQ(hello(ipc::kMagicV1), -1);
  EXPECT_EQ(hello(ipc::kMagic), static_cast<int>(ipc::MsgType::kOk));
}

// ---------------------------------------------------------------- across processes

// The child: an agent "decode-ipc" with fake device memory of `size` bytes on device 3 (pattern
// `seed`). Commands: "wait" -> the first notification and the memory's checksum at that moment.
[[noreturn]] void ChildMain(int in_fd, int out_fd, uint64_t size, uint64_t seed) {
  auto dev = std::make_shared<FakeDevice>();
  auto agent = IpcAgent("decode-ipc", dev);
  if (!agent) _exit(3);
  DeviceBuffer buf = dev->Alloc(3, size);
  uint8_t* view = dev->Alias(3, buf.addr(), size);
  std::vector<uint8_t> pattern(size);
  FillRandom(pattern, seed);
  std::memcpy(view, pattern.data(), size);
  std::mutex mu;
  std::string first;  // "<peer>/<message> <checksum when it arrived>"
  auto reg = agent->RegisterMemory(buf.ptr(), size, MemoryKind::kDevice, 3);
  if (!reg.ok() || !WriteMsg(out_fd, agent->ExportMetadata())) _exit(4);
  for (;;) {
    auto cmd = ReadMsg(in_fd);
    if (!cmd || *cmd == "quit") {  // the agent shuts down first: its threads are joined
      reg->Reset();
      agent.reset();
      _exit(0);
    }
    std::string answer = "(none)";
    for (auto until = Clock::now() + 10s; Clock::now() < until;) {
      auto notes = agent->GetNotifications();
      if (!notes.empty()) {
        answer = notes[0].peer + "/" + notes[0].message + " " + std::to_string(Checksum(view, size));
        break;
      }
      std::this_thread::sleep_for(200us);
    }
    WriteMsg(out_fd, answer);
  }
}

struct Child {
  pid_t pid = -1;
  int to = -1, from = -1;
  std::string metadata;
  Child(uint64_t size, uint64_t seed) {
    int down[2], up[2];
    EXPECT_EQ(pipe(down), 0);
    EXPECT_EQ(pipe(up), 0);
    pid = fork();
    if (pid == 0) {
      ::close(down[1]);
      ::close(up[0]);
      ChildMain(down[0], up[1], size, seed);
    }
    ::close(down[0]);
    ::close(up[1]);
    to = down[1];
    from = up[0];
    metadata = ReadMsg(from).value_or("");
  }
  void Kill() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    UnlinkSegmentsOf(pid);
    pid = -1;
  }
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGCONT);
      WriteMsg(to, "quit");
      for (int i = 0; i < 200 && waitpid(pid, nullptr, WNOHANG) == 0; ++i) std::this_thread::sleep_for(10ms);
      Kill();
    }
    ::close(to);
    ::close(from);
  }
};

TEST(CudaIpcProcessTest, WriteReadNotifyBadRangeStallAndKill) {
  constexpr uint64_t kSize = 32 << 20;
  Child child(kSize, 41);
  ASSERT_FALSE(child.metadata.empty());
  auto md = DecodeMetadata(child.metadata);
  ASSERT_TRUE(md.ok());
  EXPECT_EQ(LocalityOf(*md), Locality::kSameNode);
  ASSERT_EQ(md->regions.size(), 1u);
  ASSERT_TRUE(md->regions[0].backend_info.count("cuda_ipc"));
  const uint64_t remote = md->regions[0].addr;

  auto dev = std::make_shared<FakeDevice>();
  auto agent = IpcAgent("prefill-ipc", dev);
  DeviceBuffer src = dev->Alloc(0, kSize), back = dev->Alloc(0, kSize);
  std::vector<uint8_t> pattern(kSize);
  FillRandom(pattern, 42);
  std::memcpy(dev->Alias(0, src.addr(), kSize), pattern.data(), kSize);
  auto rs = std::move(agent->RegisterMemory(src.ptr(), kSize, MemoryKind::kDevice, 0).value());
  auto rb = std::move(agent->RegisterMemory(back.ptr(), kSize, MemoryKind::kDevice, 0).value());
  auto peer = agent->LoadPeerMetadata(child.metadata);
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();
  EXPECT_EQ(agent->BackendFor(*peer, MemoryKind::kDevice).value(), "cuda_ipc");

  // READ the child's pattern.
  auto rd = agent->Post(Op::kRead, Dev(back.addr(), kSize, 0), Dev(remote, kSize, 3), *peer);
  ASSERT_TRUE(rd.ok());
  ASSERT_EQ(WaitEnd(*rd), TransferState::kDone) << rd->status().ToString();
  std::vector<uint8_t> expected(kSize);
  FillRandom(expected, 41);
  EXPECT_EQ(Checksum(dev->Alias(0, back.addr(), kSize), kSize), Checksum(expected.data(), kSize));

  // WRITE as KV blocks (64 KiB descriptors that coalesce), copies landing 100 ms late: the child
  // sees the notification only with every byte there.
  dev->set_copy_delay(100ms);
  DescList l, r;
  l.kind = r.kind = MemoryKind::kDevice;
  for (uint64_t off = 0; off < kSize; off += 64 << 10) {
    l.Add(src.addr() + off, 64 << 10, 0);
    r.Add(remote + off, 64 << 10, 3);
  }
  auto w = agent->Post(Op::kWrite, l, r, *peer, "req-1");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->num_regions(), 1u);
  ASSERT_TRUE(WriteMsg(child.to, "wait"));
  ASSERT_EQ(WaitEnd(*w), TransferState::kDone) << w->status().ToString();
  EXPECT_EQ(ReadMsg(child.from).value_or(""), "prefill-ipc/req-1 " + std::to_string(Checksum(pattern.data(), kSize)));
  dev->set_copy_delay(0ms);

  // A range past the child's region: refused before anything moves.
  EXPECT_EQ(agent->Post(Op::kWrite, Dev(src.addr(), 8192, 0), Dev(remote + kSize - 4096, 8192, 3), *peer)
                .status()
                .code(),
            StatusCode::kInvalidArgument);

  // Stalled (SIGSTOP): BEGIN gets no answer; the deadline ends the transfer.
  ASSERT_EQ(::kill(child.pid, SIGSTOP), 0);
  int wstatus = 0;  // stopped for sure (the signal lands asynchronously)
  ASSERT_EQ(::waitpid(child.pid, &wstatus, WUNTRACED), child.pid);
  ASSERT_TRUE(WIFSTOPPED(wstatus));
  PostOptions short_timeout;
  short_timeout.timeout = 400ms;
  auto t0 = Clock::now();
  auto stalled = agent->Post(Op::kWrite, Dev(src.addr(), 1 << 20, 0), Dev(remote, 1 << 20, 3), *peer, "late",
                             short_timeout);
  ASSERT_TRUE(stalled.ok());
  EXPECT_EQ(WaitEnd(*stalled, 5s), TransferState::kError);
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(waited, 0.35);
  EXPECT_LT(waited, 2.0);
  EXPECT_NE(stalled->status().message().find("timed out"), std::string::npos) << stalled->status().ToString();
  ASSERT_EQ(::kill(child.pid, SIGCONT), 0);

  // Killed while the copies run (they land 300 ms late): an error soon after, no hang.
  dev->set_copy_delay(300ms);
  auto h = agent->Post(Op::kWrite, Dev(src.addr(), kSize, 0), Dev(remote, kSize, 3), *peer, "never");
  ASSERT_TRUE(h.ok());
  std::this_thread::sleep_for(100ms);
  ASSERT_EQ(h->Check(), TransferState::kInProgress);
  t0 = Clock::now();
  child.Kill();
  EXPECT_EQ(WaitEnd(*h, 5s), TransferState::kError);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 1.5);
  EXPECT_EQ(h->status().code(), StatusCode::kNotFound) << h->status().ToString();
  dev->set_copy_delay(0ms);
  // And the next transfer to it fails at once: nothing listens.
  auto gone = agent->Post(Op::kWrite, Dev(src.addr(), 4096, 0), Dev(remote, 4096, 3), *peer);
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(WaitEnd(*gone, 5s), TransferState::kError);
  EXPECT_NE(gone->status().message().find("gone"), std::string::npos) << gone->status().ToString();
  TransferStats s = agent->stats();
  EXPECT_EQ(s.num_transfers, 2u);
  EXPECT_EQ(s.num_errors, 3u);
  EXPECT_EQ(dev->violations(), "");
}

}  // namespace
}  // namespace tandem::transfer
