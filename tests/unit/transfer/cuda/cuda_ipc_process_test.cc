// The cuda_ipc backend between two processes on real GPUs (test_transfer_cuda; skips without a
// GPU): the child is this binary re-executed (fork + exec, so it starts CUDA afresh) running only
// CudaIpcChild.Serve, which owns 64 MiB on cuda:1 (cuda:0 with one GPU) and talks to the parent
// over two pipes named in TANDEM_CUDA_IPC_CHILD ("<in fd>,<out fd>"). The parent, on cuda:0,
// READs the child's pattern, WRITEs KV-shaped blocks with a notification (the child checksums
// its memory when the notification arrives), and sees a killed child as an error.
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "../pipe_msg.h"
#include "../transfer_test_util.h"
#include "transfer/cuda/cuda_copier.h"
#include "transfer/cuda/cuda_ipc_api.h"
#include "transfer/metadata.h"

namespace tandem::transfer {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::Checksum;
using testing::FillRandom;
using testing::ReadMsg;
using testing::WaitEnd;
using testing::WriteMsg;

constexpr uint64_t kSize = 64 << 20;

std::vector<uint8_t> Pattern(uint64_t seed) {
  std::vector<uint8_t> p(kSize);
  FillRandom(p, seed);
  return p;
}

std::unique_ptr<Agent> IpcAgent(const std::string& name, int sm_ctas = 0) {
  RegisterCudaIpcBackend();
  AgentOptions o;
  o.name = name;
  o.backends = {"cuda_ipc"};
  o.backend_params["cuda_ipc"]["sm_ctas"] = o.backend_params["cuda_ipc"]["sm_ctas_peer"] = std::to_string(sm_ctas);
  o.timeout = 20s;
  auto a = Agent::Create(o);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return a.ok() ? std::move(a).value() : nullptr;
}

uint64_t DeviceChecksum(int device, const void* p) {
  std::vector<uint8_t> host(kSize);
  cudaSetDevice(device);
  EXPECT_EQ(cudaMemcpy(host.data(), p, kSize, cudaMemcpyDeviceToHost), cudaSuccess);
  return Checksum(host.data(), kSize);
}

// Runs only in the child process.
TEST(CudaIpcChild, Serve) {
  const char* fds = std::getenv("TANDEM_CUDA_IPC_CHILD");
  if (!fds) GTEST_SKIP() << "the child half of CudaIpcCudaProcessTest";
  int in = -1, out = -1;
  ASSERT_EQ(std::sscanf(fds, "%d,%d", &in, &out), 2);
  const int device = CudaDeviceCount() > 1 ? 1 : 0;
  void* mem = nullptr;
  cudaSetDevice(device);
  ASSERT_EQ(cudaMalloc(&mem, kSize), cudaSuccess);
  auto pattern = Pattern(41);
  ASSERT_EQ(cudaMemcpy(mem, pattern.data(), kSize, cudaMemcpyHostToDevice), cudaSuccess);
  auto agent = IpcAgent("decode-gpu");
  ASSERT_TRUE(agent);
  auto reg = agent->RegisterMemory(mem, kSize, MemoryKind::kDevice, device);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  ASSERT_TRUE(WriteMsg(out, agent->ExportMetadata()));
  for (;;) {
    auto cmd = ReadMsg(in);
    if (!cmd || *cmd == "quit") break;
    std::string answer = "(none)";
    for (auto until = Clock::now() + 10s; Clock::now() < until;) {
      auto notes = agent->GetNotifications();
      if (!notes.empty()) {
        answer = notes[0].peer + "/" + notes[0].message + " " + std::to_string(DeviceChecksum(device, mem));
        break;
      }
      std::this_thread::sleep_for(200us);
    }
    WriteMsg(out, answer);
  }
  reg->Reset();
  agent.reset();
  cudaFree(mem);
}

// The parent's half; `sm_ctas` > 0: the parent's copies by the copy kernel (its stores or loads
// reach the child's memory through the opened IPC handle).
void WriteReadAcrossProcessesAndAKilledPeer(int sm_ctas) {
  int down[2], up[2];
  ASSERT_EQ(pipe(down), 0);
  ASSERT_EQ(pipe(up), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    ::close(down[1]);
    ::close(up[0]);
    const std::string env = std::to_string(down[0]) + "," + std::to_string(up[1]);
    ::setenv("TANDEM_CUDA_IPC_CHILD", env.c_str(), 1);
    ::execl("/proc/self/exe", "test_transfer_cuda", "--gtest_filter=CudaIpcChild.Serve", nullptr);
    _exit(127);
  }
  ::close(down[0]);
  ::close(up[1]);
  const int to = down[1], from = up[0];
  auto metadata = ReadMsg(from);
  ASSERT_TRUE(metadata.has_value()) << "the child died";
  auto md = DecodeMetadata(*metadata);
  ASSERT_TRUE(md.ok());
  ASSERT_EQ(md->regions.size(), 1u);
  const uint64_t remote = md->regions[0].addr;
  const int32_t remote_dev = md->regions[0].device_id;

  void *src = nullptr, *back = nullptr;
  cudaSetDevice(0);
  ASSERT_EQ(cudaMalloc(&src, kSize), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&back, kSize), cudaSuccess);
  auto mine = Pattern(42);
  ASSERT_EQ(cudaMemcpy(src, mine.data(), kSize, cudaMemcpyHostToDevice), cudaSuccess);
  {
    auto agent = IpcAgent("prefill-gpu", sm_ctas);
    ASSERT_TRUE(agent);
    auto rs = agent->RegisterMemory(src, kSize, MemoryKind::kDevice, 0);
    auto rb = agent->RegisterMemory(back, kSize, MemoryKind::kDevice, 0);
    ASSERT_TRUE(rs.ok() && rb.ok()) << rs.status().ToString() << rb.status().ToString();
    auto peer = agent->LoadPeerMetadata(*metadata);
    ASSERT_TRUE(peer.ok()) << peer.status().ToString();
    ASSERT_EQ(agent->BackendFor(*peer, MemoryKind::kDevice).value(), "cuda_ipc");
    auto dev = [](uint64_t addr, uint64_t len, int32_t d) {
      DescList l;
      l.kind = MemoryKind::kDevice;
      l.Add(addr, len, d);
      return l;
    };
    auto rd = agent->Post(Op::kRead, dev(reinterpret_cast<uint64_t>(back), kSize, 0), dev(remote, kSize, remote_dev),
                          *peer);
    ASSERT_TRUE(rd.ok()) << rd.status().ToString();
    ASSERT_EQ(WaitEnd(*rd), TransferState::kDone) << rd->status().ToString();
    auto theirs = Pattern(41);
    EXPECT_EQ(DeviceChecksum(0, back), Checksum(theirs.data(), kSize));

    DescList l, r;  // KV blocks of 64 KiB that coalesce into one region
    l.kind = r.kind = MemoryKind::kDevice;
    for (uint64_t off = 0; off < kSize; off += 64 << 10) {
      l.Add(reinterpret_cast<uint64_t>(src) + off, 64 << 10, 0);
      r.Add(remote + off, 64 << 10, remote_dev);
    }
    ASSERT_TRUE(WriteMsg(to, "wait"));
    auto w = agent->Post(Op::kWrite, l, r, *peer, "gpu-1");
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_EQ(WaitEnd(*w), TransferState::kDone) << w->status().ToString();
    EXPECT_EQ(w->num_regions(), 1u);
    EXPECT_EQ(ReadMsg(from).value_or(""), "prefill-gpu/gpu-1 " + std::to_string(Checksum(mine.data(), kSize)));
    std::printf("cuda_ipc across processes (%s), cuda:0 -> cuda:%d: 64 MiB in %.3f ms\n",
                sm_ctas > 0 ? "copy kernel" : "copy engines", remote_dev, w->seconds() * 1e3);

    // Killed: the next transfer is an error, soon.
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    auto t0 = Clock::now();
    auto gone = agent->Post(Op::kWrite, l, r, *peer, "never");
    ASSERT_TRUE(gone.ok());
    EXPECT_EQ(WaitEnd(*gone, 10s), TransferState::kError);
    EXPECT_LT(Clock::now() - t0, 2s);
    EXPECT_EQ(gone->status().code(), StatusCode::kNotFound) << gone->status().ToString();
  }
  ::close(to);
  ::close(from);
  cudaFree(src);
  cudaFree(back);
}

TEST(CudaIpcCudaProcessTest, WriteReadAcrossProcessesAndAKilledPeer) {
  if (std::getenv("TANDEM_CUDA_IPC_CHILD")) GTEST_SKIP() << "in the child";
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  WriteReadAcrossProcessesAndAKilledPeer(0);
}

TEST(CudaIpcCudaProcessTest, CopyKernelAcrossProcessesAndAKilledPeer) {
  if (std::getenv("TANDEM_CUDA_IPC_CHILD")) GTEST_SKIP() << "in the child";
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  WriteReadAcrossProcessesAndAKilledPeer(32);
}

}  // namespace
}  // namespace tandem::transfer
