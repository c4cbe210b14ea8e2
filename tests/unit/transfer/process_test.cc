// The tcp backend between two processes: fork() a child that runs an agent; metadata and commands
// travel through pipes. The child is forked before the parent creates any agent (no threads yet).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "fake_device.h"
#include "pipe_msg.h"
#include "transfer_test_util.h"

namespace tandem::transfer {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::Checksum;
using testing::ExpectQueuedWriteTimesOut;
using testing::FillRandom;
using testing::MakeAgent;
using testing::ReadMsg;
using testing::WaitEnd;
using testing::WriteMsg;

// The child: an agent named `name` with one registered buffer of `size` bytes (pattern `seed`),
// host memory or (`device`) fake device memory of device 3 staged by the tcp backend.
// Commands: "wait" -> the first notification's message and the buffer's checksum; "quit".
[[noreturn]] void ChildMain(const std::string& name, int in_fd, int out_fd, uint64_t size, uint64_t seed,
                            bool device) {
  AgentOptions o;
  o.name = name;
  o.backends = {"tcp"};
  std::shared_ptr<testing::FakeDevice> fake;
  testing::DeviceBuffer dev_buf;
  if (device) {
    fake = std::make_shared<testing::FakeDevice>();
    o.device_copier = fake;
    o.backend_params["tcp"]["staging_chunk_bytes"] = "1048576";
  }
  auto agent = Agent::Create(o);
  if (!agent.ok()) _exit(3);
  std::vector<uint8_t> host_buf(device ? 0 : size);
  uint8_t* data = host_buf.data();
  if (device) {
    dev_buf = fake->Alloc(3, size);
    data = fake->Alias(3, dev_buf.addr(), size);  // the child's own view; the agent gets the device address
  }
  std::vector<uint8_t> pattern(size);
  FillRandom(pattern, seed);
  std::memcpy(data, pattern.data(), size);
  auto reg = device ? (*agent)->RegisterMemory(dev_buf.ptr(), size, MemoryKind::kDevice, 3)
                    : (*agent)->RegisterMemory(data, size);
  if (!reg.ok()) _exit(4);
  if (!WriteMsg(out_fd, (*agent)->ExportMetadata())) _exit(5);
  for (;;) {
    auto cmd = ReadMsg(in_fd);
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
      WriteMsg(out_fd, message + " " + std::to_string(Checksum(data, size)));
    }
  }
}

struct Child {
  pid_t pid = -1;
  int to = -1, from = -1;
  std::string metadata;

  static Child Spawn(const std::string& name, uint64_t size, uint64_t seed, bool device = false) {
    int down[2], up[2];
    EXPECT_EQ(pipe(down), 0);
    EXPECT_EQ(pipe(up), 0);
    Child c;
    c.pid = fork();
    if (c.pid == 0) {
      ::close(down[1]);
      ::close(up[0]);
      ChildMain(name, down[0], up[1], size, seed, device);
    }
    ::close(down[0]);
    ::close(up[1]);
    c.to = down[1];
    c.from = up[0];
    return c;
  }
  bool ReadMetadata() {
    auto md = ReadMsg(from);
    if (md) metadata = *md;
    return md.has_value();
  }
  std::string Ask(const std::string& cmd) {
    if (!WriteMsg(to, cmd)) return "";
    return ReadMsg(from).value_or("");
  }
  void Kill() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    testing::UnlinkSegmentsOf(pid);  // its fake device memory
    pid = -1;
  }
  ~Child() {
    if (pid > 0) {
      WriteMsg(to, "quit");
      int status = 0;
      for (int i = 0; i < 200 && waitpid(pid, &status, WNOHANG) == 0; ++i) std::this_thread::sleep_for(10ms);
      Kill();
    }
    if (to >= 0) ::close(to);
    if (from >= 0) ::close(from);
  }
};

TEST(TransferProcessTest, WriteAndReadAcrossProcesses) {
  constexpr uint64_t kSize = 16 << 20;
  Child child = Child::Spawn("decode-child", kSize, 77);
  ASSERT_TRUE(child.ReadMetadata());
  auto agent = MakeAgent("prefill-parent");  // local + tcp: tcp is the one that reaches the child
  std::vector<uint8_t> src(kSize), back(kSize, 0);
  FillRandom(src, 5);
  auto rs = std::move(agent->RegisterMemory(src.data(), src.size()).value());
  auto rb = std::move(agent->RegisterMemory(back.data(), back.size()).value());
  auto peer = agent->LoadPeerMetadata(child.metadata);
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();
  EXPECT_EQ(agent->BackendFor(*peer).value(), "tcp");
  uint64_t remote = 0;  // the child's buffer address, from its metadata
  {
    auto md = DecodeMetadata(child.metadata);
    ASSERT_TRUE(md.ok());
    ASSERT_EQ(md->regions.size(), 1u);
    remote = md->regions[0].addr;
    EXPECT_EQ(LocalityOf(*md), Locality::kSameNode);
  }
  // READ the child's seeded pattern first, then overwrite it with ours.
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
  for (uint64_t off = 0; off < kSize; off += kSize / 64) {  // 64 descriptors, coalesced into one region
    wl.Add(src.data() + off, kSize / 64);
    wr.Add(remote + off, kSize / 64);
  }
  auto w = agent->Post(Op::kWrite, wl, wr, *peer, "done:7");
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(WaitEnd(*w), TransferState::kDone) << w->status().ToString();
  EXPECT_EQ(w->num_regions(), 1u);
  EXPECT_EQ(child.Ask("wait"), "prefill-parent/done:7 " + std::to_string(Checksum(src.data(), kSize)));
}

// A child that is stopped (SIGSTOP) takes data until its socket buffers fill; a large WRITE then
// stays in flight. Killing the child must end it in an error at once; a short timeout must end
// another one; a restarted peer (new metadata, same name) then works.
TEST(TransferProcessTest, PeerKilledOrStalledMidTransferEndsInAnError) {
  constexpr uint64_t kSize = 256 << 20;
  Child first = Child::Spawn("decode-x", kSize, 1);
  Child second = Child::Spawn("decode-x", kSize, 2);  // the "restarted" worker, same name
  ASSERT_TRUE(first.ReadMetadata());
  ASSERT_TRUE(second.ReadMetadata());
  auto agent = MakeAgent("prefill-y", {"tcp"});
  std::vector<uint8_t> src(kSize);
  FillRandom(src, 9);
  auto rs = std::move(agent->RegisterMemory(src.data(), src.size()).value());
  ASSERT_TRUE(agent->LoadPeerMetadata(first.metadata).ok());
  uint64_t remote = DecodeMetadata(first.metadata)->regions[0].addr;
  DescList l, r;
  l.Add(src.data(), kSize);
  r.Add(remote, kSize);

  ASSERT_EQ(::kill(first.pid, SIGSTOP), 0);
  auto h = agent->Post(Op::kWrite, l, r, "decode-x", "never");
  ASSERT_TRUE(h.ok());
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(h->Check(), TransferState::kInProgress);
  // A second transfer with a short timeout, queued behind the first.
  ExpectQueuedWriteTimesOut(*agent, l, r, "decode-x");
  // The timeout took the connection down: the first transfer (on it or striped over it) may have
  // failed too; kill the child for whichever is still in flight.
  auto t0 = Clock::now();
  first.Kill();
  EXPECT_EQ(WaitEnd(*h, 5s), TransferState::kError);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);

  // Same name, new instance: transfers work again.
  auto peer = agent->LoadPeerMetadata(second.metadata);
  ASSERT_TRUE(peer.ok());
  uint64_t remote2 = DecodeMetadata(second.metadata)->regions[0].addr;
  DescList r2;
  r2.Add(remote2, kSize);
  auto h3 = agent->Post(Op::kWrite, l, r2, "decode-x", "again");
  ASSERT_TRUE(h3.ok());
  ASSERT_EQ(WaitEnd(*h3), TransferState::kDone) << h3->status().ToString();
  EXPECT_EQ(second.Ask("wait"), "prefill-y/again " + std::to_string(Checksum(src.data(), kSize)));
  TransferStats s = agent->stats();
  EXPECT_EQ(s.num_transfers, 1u);
  EXPECT_EQ(s.num_errors, 2u);
}

TEST(TransferProcessTest, PeerKilledMidTransferWithoutTimeout) {
  constexpr uint64_t kSize = 256 << 20;
  Child child = Child::Spawn("decode-z", kSize, 1);
  ASSERT_TRUE(child.ReadMetadata());
  auto agent = MakeAgent("prefill-z", {"tcp"}, {{"num_connections", "1"}});
  std::vector<uint8_t> src(kSize, 1);
  auto rs = std::move(agent->RegisterMemory(src.data(), src.size()).value());
  ASSERT_TRUE(agent->LoadPeerMetadata(child.metadata).ok());
  DescList l, r;
  l.Add(src.data(), kSize);
  r.Add(DecodeMetadata(child.metadata)->regions[0].addr, kSize);
  ASSERT_EQ(::kill(child.pid, SIGSTOP), 0);
  auto h = agent->Post(Op::kRead, l, r, "decode-z");  // READ this time: the child owes us the data
  ASSERT_TRUE(h.ok());
  std::this_thread::sleep_for(200ms);
  ASSERT_EQ(h->Check(), TransferState::kInProgress);
  auto t0 = Clock::now();
  child.Kill();
  EXPECT_EQ(WaitEnd(*h, 5s), TransferState::kError);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 1.0);
  EXPECT_FALSE(h->status().ok());
}

// Device memory on both sides (fake devices, one per process), staged by tcp: WRITE and READ
// across processes, then a peer that stops mid-transfer and is killed: an error, no hang.
TEST(TransferProcessTest, DeviceMemoryAcrossProcessesAndAPeerKilledMidTransfer) {
  constexpr uint64_t kSize = 64 << 20;
  Child child = Child::Spawn("decode-dev", kSize, 21, /*device=*/true);
  ASSERT_TRUE(child.ReadMetadata());
  auto md = DecodeMetadata(child.metadata);
  ASSERT_TRUE(md.ok());
  ASSERT_EQ(md->regions.size(), 1u);
  EXPECT_EQ(md->regions[0].kind, MemoryKind::kDevice);
  EXPECT_EQ(md->regions[0].device_id, 3);
  const uint64_t remote = md->regions[0].addr;

  auto fake = std::make_shared<testing::FakeDevice>();
  AgentOptions o;
  o.name = "prefill-dev";
  o.backends = {"tcp"};
  o.device_copier = fake;
  o.backend_params["tcp"] = {{"staging_chunk_bytes", "1048576"}, {"num_connections", "1"}};
  auto agent = std::move(Agent::Create(o).value());
  testing::DeviceBuffer src = fake->Alloc(1, kSize), back = fake->Alloc(1, kSize);
  uint8_t* src_view = fake->Alias(1, src.addr(), kSize);
  uint8_t* back_view = fake->Alias(1, back.addr(), kSize);
  std::vector<uint8_t> pattern(kSize);
  FillRandom(pattern, 8);
  std::memcpy(src_view, pattern.data(), kSize);
  auto rs = std::move(agent->RegisterMemory(src.ptr(), kSize, MemoryKind::kDevice, 1).value());
  auto rb = std::move(agent->RegisterMemory(back.ptr(), kSize, MemoryKind::kDevice, 1).value());
  ASSERT_TRUE(agent->LoadPeerMetadata(child.metadata).ok());
  auto dev = [](uint64_t addr, uint64_t len, int32_t device) {
    DescList l;
    l.kind = MemoryKind::kDevice;
    l.Add(addr, len, device);
    return l;
  };

  auto rd = agent->Post(Op::kRead, dev(back.addr(), kSize, 1), dev(remote, kSize, 3), "decode-dev");
  ASSERT_TRUE(rd.ok()) << rd.status().ToString();
  ASSERT_EQ(WaitEnd(*rd), TransferState::kDone) << rd->status().ToString();
  std::vector<uint8_t> expected(kSize);
  FillRandom(expected, 21);
  EXPECT_EQ(Checksum(back_view, kSize), Checksum(expected.data(), kSize));
  auto w = agent->Post(Op::kWrite, dev(src.addr(), kSize, 1), dev(remote, kSize, 3), "decode-dev", "dev:1");
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(WaitEnd(*w), TransferState::kDone) << w->status().ToString();
  EXPECT_EQ(child.Ask("wait"), "prefill-dev/dev:1 " + std::to_string(Checksum(pattern.data(), kSize)));
  EXPECT_GE(fake->counts().to_host, kSize);
  EXPECT_GE(fake->counts().from_host, kSize);

  // Stopped: the WRITE stays in flight (socket buffers full); killed: an error within a second.
  ASSERT_EQ(::kill(child.pid, SIGSTOP), 0);
  auto h = agent->Post(Op::kWrite, dev(src.addr(), kSize, 1), dev(remote, kSize, 3), "decode-dev", "never");
  ASSERT_TRUE(h.ok());
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(h->Check(), TransferState::kInProgress);
  auto t0 = Clock::now();
  child.Kill();
  EXPECT_EQ(WaitEnd(*h, 5s), TransferState::kError);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 1.0);
  EXPECT_EQ(fake->violations(), "");
}

}  // namespace
}  // namespace tandem::transfer
