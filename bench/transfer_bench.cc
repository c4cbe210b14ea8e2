// KV transfer time and bandwidth per backend (issue 7): 1, 16, 128 and 1800 tokens of Qwen3-8B KV
// (36 layers, 8 KV heads, head_dim 128, bf16, blocks of 16 tokens: 147,456 B per token, 64 KiB per
// block and layer), sent as the prefill worker sends them: one WRITE of ceil(tokens / 16) blocks of
// every layer, descriptors layer-major (one 64 KiB descriptor per block and layer, coalescing into
// one region per layer: 36 regions), with a notification, timed from Post to completion (the
// target acknowledged). Each side's pool is 36 layer regions of 113 blocks, registered per layer as
// the worker does.
//
//   build/bench/transfer_bench [--min-seconds S] [--only NAME[,NAME..]] [--param BACKEND.KEY=VALUE]..
//                              [--poll-wait]
//   (--param: a backend parameter of the initiating agent, e.g. cuda_ipc.num_streams=1;
//   --poll-wait: wait by polling Check() on one busy core instead of sleeping in Wait(), as a
//   caller that polls would; stderr shows, per row, the medians of Post() itself, of the transfer
//   as the agent timed it, and of the rest: the waiter's wake-up)
//
// Host memory: local (one process: memcpy), and tcp, ucx, libfabric (where built) with the target
// in a second process (this binary re-executed as `--child`), plus a plain loopback socket copy of
// the same bytes for scale. Device memory (built with CUDA and a GPU present): cuda_ipc and tcp
// (staged through pinned host buffers), source on cuda:0 in this process, destination on cuda:1
// (cuda:0 with one GPU) in the child; and in the same run the raw device copy bandwidth
// (cudaMemcpyPeer cuda:0 -> cuda:1, 256 MB) and each device backend's ratio to it. A backend that
// cannot run here says why in its row. The table comes last. GB/s = 1e9 bytes per second; times
// are the median of the timed iterations (one warm-up first).
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "transfer/agent.h"
#include "transfer/metadata.h"
#include "transfer/staging.h"
#ifdef TANDEM_HAVE_CUDA_COPIER
#include <cuda_runtime_api.h>

#include "transfer/cuda/cuda_copier.h"
#include "transfer/cuda/cuda_ipc_api.h"
#endif

namespace tandem::transfer {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kLayers = 36;
constexpr uint64_t kBlockBytes = 64 << 10;  // 16 tokens x 2 (K, V) x 8 heads x 128 x bf16
constexpr uint64_t kTokenBytes = 147456;
constexpr int kBlockTokens = 16;
constexpr int kPoolBlocks = 113;  // ceil(1800 / 16)
constexpr uint64_t kLayerBytes = kPoolBlocks * kBlockBytes;
constexpr uint64_t kPoolBytes = kLayers * kLayerBytes;
constexpr int kTokens[] = {1, 16, 128, 1800};

double g_min_seconds = 0.5;
bool g_poll_wait = false;  // --poll-wait
std::map<std::string, std::map<std::string, std::string>> g_params;  // --param, by backend

// ---------------------------------------------------------------- memory

struct Pool {
  MemoryKind kind = MemoryKind::kHost;
  int32_t device = 0;
  uint64_t base = 0;
  std::function<void()> free;
  Pool() = default;
  Pool(const Pool&) = delete;
  ~Pool() {
    if (free) free();
  }
};

int GpuCount() {
#ifdef TANDEM_HAVE_CUDA_COPIER
  return CudaDeviceCount();
#else
  return 0;
#endif
}

// A KV pool of kPoolBytes, filled with a pattern.
std::unique_ptr<Pool> AllocPool(MemoryKind kind, int32_t device) {
  auto p = std::make_unique<Pool>();
  p->kind = kind;
  p->device = device;
  if (kind == MemoryKind::kHost) {
    auto* v = new std::vector<uint8_t>(kPoolBytes);
    for (uint64_t i = 0; i < kPoolBytes; i += 4096) (*v)[i] = static_cast<uint8_t>(i * 31 + 7);
    p->base = reinterpret_cast<uint64_t>(v->data());
    p->free = [v] { delete v; };
    return p;
  }
#ifdef TANDEM_HAVE_CUDA_COPIER
  void* d = nullptr;
  cudaSetDevice(device);
  if (cudaMalloc(&d, kPoolBytes) != cudaSuccess) return nullptr;
  cudaMemset(d, 0x5a, kPoolBytes);
  cudaDeviceSynchronize();
  p->base = reinterpret_cast<uint64_t>(d);
  p->free = [d, device] {
    cudaSetDevice(device);
    cudaFree(d);
  };
  return p;
#else
  return nullptr;
#endif
}

// ---------------------------------------------------------------- agents

// One agent moving `kind` memory with `backend` (tcp on device memory: the CUDA copier stages it).
Result<std::unique_ptr<Agent>> MakeAgent(const std::string& name, const std::string& backend, MemoryKind kind) {
  AgentOptions o;
  o.name = name;
  o.backends = {backend};
  o.on_notification = [](const Notification&) {};
  for (const auto& [b, kv] : g_params) {
    for (const auto& [k, v] : kv) o.backend_params[b][k] = v;
  }
#ifdef TANDEM_HAVE_CUDA_COPIER
  if (backend == "cuda_ipc") RegisterCudaIpcBackend();
  if (kind == MemoryKind::kDevice && backend == "tcp") o.device_copier = MakeCudaCopier();
#endif
  return Agent::Create(std::move(o));
}

Result<std::vector<Registration>> RegisterPool(Agent& agent, const Pool& pool) {
  std::vector<Registration> regs;
  for (int l = 0; l < kLayers; ++l) {
    TANDEM_ASSIGN_OR_RETURN(auto reg, agent.RegisterMemory(reinterpret_cast<const void*>(pool.base + l * kLayerBytes),
                                                           kLayerBytes, pool.kind, pool.device));
    regs.push_back(std::move(reg));
  }
  return regs;
}

// ---------------------------------------------------------------- the child (the target)

bool WriteAll(int fd, const void* p, size_t n) {
  auto* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}
bool ReadAll(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// `--child BACKEND KIND DEVICE`: the target agent and its pool; its metadata (or "!" and an error)
// goes to stdout, length-prefixed; it lives until stdin closes.
int ChildMain(const std::string& backend, const std::string& kind_name, int32_t device) {
  const MemoryKind kind = kind_name == "device" ? MemoryKind::kDevice : MemoryKind::kHost;
  std::string out;
  auto pool = AllocPool(kind, device);
  auto agent = MakeAgent("bench-decode", backend, kind);
  std::vector<Registration> regs;
  if (!pool) {
    out = "!cannot allocate the pool on " + MemoryName(kind, device);
  } else if (!agent.ok()) {
    out = "!" + agent.status().ToString();
  } else if (auto r = RegisterPool(**agent, *pool); !r.ok()) {
    out = "!" + r.status().ToString();
  } else {
    regs = std::move(*r);
    out = (*agent)->ExportMetadata();
  }
  uint32_t n = static_cast<uint32_t>(out.size());
  if (!WriteAll(1, &n, 4) || !WriteAll(1, out.data(), n)) return 1;
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  return 0;
}

struct Child {
  pid_t pid = -1;
  int to = -1;
  std::string metadata, error;

  Child(const std::string& backend, MemoryKind kind, int32_t device) {
    int down[2], up[2];
    if (::pipe2(down, O_CLOEXEC) != 0 || ::pipe2(up, O_CLOEXEC) != 0) {
      error = "pipe failed";
      return;
    }
    pid = ::fork();
    if (pid == 0) {
      ::dup2(down[0], 0);
      ::dup2(up[1], 1);
      std::string dev = std::to_string(device);
      const char* kind_name = kind == MemoryKind::kDevice ? "device" : "host";
      ::execl("/proc/self/exe", "transfer_bench", "--child", backend.c_str(), kind_name, dev.c_str(), nullptr);
      _exit(127);
    }
    ::close(down[0]);
    ::close(up[1]);
    to = down[1];
    uint32_t n = 0;
    if (!ReadAll(up[0], &n, 4)) {
      error = "the child process died";
    } else {
      std::string s(n, '\0');
      if (!ReadAll(up[0], s.data(), n)) error = "the child process died";
      if (!s.empty() && s[0] == '!') {
        error = s.substr(1);
      } else {
        metadata = std::move(s);
      }
    }
    ::close(up[0]);
  }
  ~Child() {
    if (pid <= 0) return;
    ::close(to);  // the child exits
    for (int i = 0; i < 500 && ::waitpid(pid, nullptr, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

// ---------------------------------------------------------------- measuring

struct Row {
  std::string name;
  int tokens = 0;
  uint64_t bytes = 0;
  size_t regions = 0;
  double ms = 0, gbps = 0;
  std::string error;
};
std::vector<Row> g_rows;

// Runs `once` (returns seconds, or nullopt on failure) for one warm-up and then until
// g_min_seconds passed (3 to 200 times); the median.
std::optional<double> Measure(const std::function<std::optional<double>()>& once) {
  if (!once()) return std::nullopt;
  std::vector<double> t;
  double total = 0;
  while (t.size() < 3 || (total < g_min_seconds && t.size() < 200)) {
    auto s = once();
    if (!s) return std::nullopt;
    t.push_back(*s);
    total += *s;
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void AddRow(const std::string& name, int tokens, uint64_t bytes, size_t regions, std::optional<double> s,
            const std::string& error = "") {
  Row r{name, tokens, bytes, regions, 0, 0, error};
  if (s) {
    r.ms = *s * 1e3;
    r.gbps = static_cast<double>(bytes) / *s / 1e9;
  } else if (r.error.empty()) {
    r.error = "transfer failed";
  }
  std::fprintf(stderr, "%-26s %5d tokens %11llu B: %s\n", name.c_str(), tokens, static_cast<unsigned long long>(bytes),
               r.error.empty() ? (std::to_string(r.ms) + " ms").c_str() : r.error.c_str());
  g_rows.push_back(std::move(r));
}

// The prefill worker's descriptors for `tokens`: blocks [0, ceil(tokens / 16)) of every layer.
void KVDescs(const Pool& src, uint64_t dst_base, int32_t dst_device, MemoryKind kind, int tokens, DescList* l,
             DescList* r) {
  l->kind = r->kind = kind;
  const int blocks = (tokens + kBlockTokens - 1) / kBlockTokens;
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int b = 0; b < blocks; ++b) {
      const uint64_t off = layer * kLayerBytes + b * kBlockBytes;
      l->Add(src.base + off, kBlockBytes, src.device);
      r->Add(dst_base + off, kBlockBytes, dst_device);
    }
  }
}

// One backend: our agent and pool, the target's (in a child process unless `same_process`).
void RunCase(const std::string& name, const std::string& backend, MemoryKind kind, int32_t src_dev, int32_t dst_dev,
             bool same_process) {
  auto fail_all = [&](const std::string& why) {
    for (int t : kTokens) AddRow(name, t, 0, 0, std::nullopt, why);
  };
  std::unique_ptr<Child> child;
  std::unique_ptr<Pool> local_dst;
  std::unique_ptr<Agent> local_target;
  std::vector<Registration> local_target_regs;
  std::string metadata;
  if (same_process) {
    auto t = MakeAgent("bench-decode", backend, kind);
    local_dst = AllocPool(kind, dst_dev);
    if (!t.ok() || !local_dst) return fail_all(t.ok() ? "no memory" : t.status().ToString());
    local_target = std::move(*t);
    auto regs = RegisterPool(*local_target, *local_dst);
    if (!regs.ok()) return fail_all(regs.status().ToString());
    local_target_regs = std::move(*regs);
    metadata = local_target->ExportMetadata();
  } else {
    child = std::make_unique<Child>(backend, kind, dst_dev);
    if (!child->error.empty()) return fail_all(child->error);
    metadata = child->metadata;
  }
  auto agent = MakeAgent("bench-prefill", backend, kind);
  if (!agent.ok()) return fail_all(agent.status().ToString());
  auto src = AllocPool(kind, src_dev);
  if (!src) return fail_all("cannot allocate the source pool");
  auto regs = RegisterPool(**agent, *src);
  if (!regs.ok()) return fail_all(regs.status().ToString());
  auto peer = (*agent)->LoadPeerMetadata(metadata);
  if (!peer.ok()) return fail_all(peer.status().ToString());
  auto md = DecodeMetadata(metadata);
  const uint64_t dst_base = md->regions.front().addr;  // layer 0; the layers follow at kLayerBytes
  for (int tokens : kTokens) {
    DescList l, r;
    KVDescs(*src, dst_base, dst_dev, kind, tokens, &l, &r);
    size_t regions = 0;
    std::string error;
    int n = 0;
    std::vector<double> post_us, agent_us, rest_us;  // where the time went, per iteration
    auto s = Measure([&]() -> std::optional<double> {
      const auto t0 = Clock::now();
      auto h = (*agent)->Post(Op::kWrite, l, r, *peer, "bench-" + std::to_string(n++));
      const auto t1 = Clock::now();
      if (!h.ok()) {
        error = h.status().ToString();
        return std::nullopt;
      }
      Status st;
      if (g_poll_wait) {
        while (h->Check() == TransferState::kInProgress) {
        }
        st = h->status();
      } else {
        st = h->Wait();
      }
      if (!st.ok()) {
        error = st.ToString();
        return std::nullopt;
      }
      const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
      const double posting = std::chrono::duration<double>(t1 - t0).count();
      post_us.push_back(posting * 1e6);
      agent_us.push_back(h->seconds() * 1e6);
      rest_us.push_back((wall - posting - h->seconds()) * 1e6);
      regions = h->num_regions();
      return wall;
    });
    AddRow(name, tokens, l.total_bytes(), regions, s, error);
    if (s && !post_us.empty()) {
      auto med = [](std::vector<double> v) {
        std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
        return v[v.size() / 2];
      };
      std::fprintf(stderr, "%-26s %5d tokens, median us: Post() %.1f, transfer as the agent timed it %.1f, "
                   "the rest (the waiter's wake-up) %.1f\n", name.c_str(), tokens, med(post_us), med(agent_us),
                   med(rest_us));
    }
  }
}

// ---------------------------------------------------------------- references

// One loopback connection; the receiver answers one byte per message.
void RunPlainSocket() {
  int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::listen(ls, 1);
  socklen_t len = sizeof(a);
  ::getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len);
  int tx = ::socket(AF_INET, SOCK_STREAM, 0);
  ::connect(tx, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  int rx = ::accept(ls, nullptr, nullptr);
  ::close(ls);
  std::vector<uint8_t> src(kPoolBytes, 1), dst(kPoolBytes);
  std::thread receiver([&] {
    for (;;) {
      uint64_t n = 0;
      if (!ReadAll(rx, &n, 8) || !ReadAll(rx, dst.data(), n)) return;
      char ack = 1;
      if (!WriteAll(rx, &ack, 1)) return;
    }
  });
  for (int tokens : kTokens) {
    const uint64_t n = kLayers * kBlockBytes * ((tokens + kBlockTokens - 1) / kBlockTokens);
    auto s = Measure([&]() -> std::optional<double> {
      auto t0 = Clock::now();
      char ack = 0;
      if (!WriteAll(tx, &n, 8) || !WriteAll(tx, src.data(), n) || !ReadAll(tx, &ack, 1)) return std::nullopt;
      return std::chrono::duration<double>(Clock::now() - t0).count();
    });
    AddRow("plain socket (host)", tokens, n, 1, s);
  }
  ::shutdown(tx, SHUT_RDWR);
  receiver.join();
  ::close(tx);
  ::close(rx);
}

// cudaMemcpyPeer of 256 MB from cuda:0 to cuda:1 (cuda:0 to itself with one GPU), GB/s; 0 without.
double RawDeviceCopyGBps(std::string* what) {
#ifdef TANDEM_HAVE_CUDA_COPIER
  const int dst_dev = GpuCount() > 1 ? 1 : 0;
  *what = "cudaMemcpyPeer cuda:0 -> cuda:" + std::to_string(dst_dev) + ", 256 MB";
  const size_t n = 256ull << 20;
  void *a = nullptr, *b = nullptr;
  cudaSetDevice(0);
  if (cudaMalloc(&a, n) != cudaSuccess) return 0;
  if (dst_dev != 0) cudaDeviceEnablePeerAccess(dst_dev, 0);
  cudaSetDevice(dst_dev);
  if (cudaMalloc(&b, n) != cudaSuccess) return 0;
  if (dst_dev != 0) cudaDeviceEnablePeerAccess(0, 0);
  (void)cudaGetLastError();
  cudaSetDevice(0);
  auto s = Measure([&]() -> std::optional<double> {
    auto t0 = Clock::now();
    if (cudaMemcpyPeer(b, dst_dev, a, 0, n) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
      return std::nullopt;
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  });
  cudaFree(a);
  cudaSetDevice(dst_dev);
  cudaFree(b);
  return s ? static_cast<double>(n) / *s / 1e9 : 0;
#else
  *what = "built without CUDA";
  return 0;
#endif
}

void PrintTable(double raw_gbps, const std::string& raw_what) {
  std::printf("\nKV transfer, Qwen3-8B (36 layers x 64 KiB per 16-token block; 36 regions per transfer), one "
              "WRITE with a notification, median; GB/s = 1e9 B/s\n");
  std::printf("%-26s %7s %12s %8s %10s %8s\n", "backend (memory)", "tokens", "bytes", "regions", "ms", "GB/s");
  for (const Row& r : g_rows) {
    if (!r.error.empty()) {
      std::printf("%-26s %7d %12s %8s %10s %8s  (%s)\n", r.name.c_str(), r.tokens, "-", "-", "-", "-", r.error.c_str());
      continue;
    }
    std::printf("%-26s %7d %12llu %8zu %10.3f %8.2f\n", r.name.c_str(), r.tokens,
                static_cast<unsigned long long>(r.bytes), r.regions, r.ms, r.gbps);
  }
  if (raw_gbps <= 0) {
    std::printf("\nraw device copy: none (%s)\n", raw_what.c_str());
    return;
  }
  std::printf("\nraw device copy (%s): %.2f GB/s\n", raw_what.c_str(), raw_gbps);
  for (const Row& r : g_rows) {
    if (r.tokens == 1800 && r.error.empty() && r.name.find("(cuda") != std::string::npos) {
      std::printf("  %-26s 1800 tokens: %7.2f GB/s = %5.1f%% of the raw copy%s\n", r.name.c_str(), r.gbps,
                  100.0 * r.gbps / raw_gbps, r.name.rfind("cuda_ipc", 0) == 0 ? " (issue 7 asks >= 80%)" : "");
    }
  }
}

bool Wanted(const std::string& only, const std::string& backend) {
  if (only.empty()) return true;
  return ("," + only + ",").find("," + backend + ",") != std::string::npos;
}

}  // namespace
}  // namespace tandem::transfer

int main(int argc, char** argv) {
  using namespace tandem::transfer;  // NOLINT
  if (argc == 5 && std::strcmp(argv[1], "--child") == 0) return ChildMain(argv[2], argv[3], std::atoi(argv[4]));
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--min-seconds") == 0 && i + 1 < argc) {
      g_min_seconds = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--poll-wait") == 0) {
      g_poll_wait = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else if (std::strcmp(argv[i], "--param") == 0 && i + 1 < argc) {
      const std::string p = argv[++i];
      const size_t dot = p.find('.'), eq = p.find('=');
      if (dot == std::string::npos || eq == std::string::npos || eq < dot) {
        std::fprintf(stderr, "--param wants BACKEND.KEY=VALUE, got '%s'\n", p.c_str());
        return 2;
      }
      g_params[p.substr(0, dot)][p.substr(dot + 1, eq - dot - 1)] = p.substr(eq + 1);
    } else {
      std::fprintf(stderr, "usage: transfer_bench [--min-seconds S] [--only local,tcp,ucx,libfabric,cuda_ipc,plain] "
                   "[--param BACKEND.KEY=VALUE]... [--poll-wait]\n");
      return 2;
    }
  }
  ::signal(SIGPIPE, SIG_IGN);
  if (Wanted(only, "plain")) RunPlainSocket();
  if (Wanted(only, "local")) RunCase("local (host)", "local", MemoryKind::kHost, 0, 0, /*same_process=*/true);
  for (const std::string& b : RegisteredBackends()) {
    if (b == "local" || b == "cuda_ipc" || !Wanted(only, b)) continue;
    RunCase(b + " (host)", b, MemoryKind::kHost, 0, 0, /*same_process=*/false);
  }
  const int gpus = GpuCount();
  double raw = 0;
  std::string raw_what = "no GPU";
  if (gpus > 0) {
    const int32_t dst = gpus > 1 ? 1 : 0;
    const std::string mem = "(cuda:0->" + std::to_string(dst) + ")";
    if (Wanted(only, "cuda_ipc")) RunCase("cuda_ipc " + mem, "cuda_ipc", MemoryKind::kDevice, 0, dst, false);
    if (Wanted(only, "tcp")) RunCase("tcp staged " + mem, "tcp", MemoryKind::kDevice, 0, dst, false);
    raw = RawDeviceCopyGBps(&raw_what);
  }
  PrintTable(raw, raw_what);
  return 0;
}
