// KV transfer bandwidth of the tcp backend beside a plain loopback TCP socket copy of the same
// bytes, measured in the same run (issue 5), the ucx and libfabric backends where built (issue 7:
// host memory over loopback here, UCX on tcp/lo, libfabric on tcp;ofi_rxm), and the local (memcpy)
// backend for scale.
//
//   build/bench/transfer_bench            [--benchmark_filter=...]
//
// Sizes are Qwen3-8B KV (144 KiB per token): 1 token, 16 tokens, ~455 tokens (64 MiB), 1800 tokens
// (265 MB). Each iteration is one WRITE, timed from Post to completion (the target acknowledged
// the data); the source is 64 KiB descriptors (one KV block of one layer each) that coalesce into
// one region. The plain copy: one connection, the receiver recv()s the bytes into its buffer and
// answers one byte; timed from the first send to that byte. Counter GB/s = 1e9 bytes per second.
// After the runs a table gives GB/s side by side and the ratio of each backend to the plain socket.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "transfer/agent.h"

namespace tandem::transfer {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kTokenBytes = 147456;  // Qwen3-8B: 36 layers x 2 x 8 KV heads x 128 x bf16
constexpr int64_t kMaxBytes = 1800 * kTokenBytes;  // 265,420,800
constexpr int64_t kBlockBytes = 64 << 10;

std::vector<uint8_t>& Src() {
  static std::vector<uint8_t> v = [] {
    std::vector<uint8_t> b(kMaxBytes);
    for (size_t i = 0; i < b.size(); i += 4096) b[i] = static_cast<uint8_t>(i * 31 + 7);
    return b;
  }();
  return v;
}
std::vector<uint8_t>& Dst() {
  static std::vector<uint8_t> v(kMaxBytes, 0);
  return v;
}

// variant -> bytes -> GB/s of each reported run (the framework's sizing runs first, then the
// reported one; with --benchmark_repetitions=N the table takes the median of the last N).
std::map<std::string, std::map<int64_t, std::vector<double>>>& Results() {
  static std::map<std::string, std::map<int64_t, std::vector<double>>> r;
  return r;
}
int& Repetitions() {
  static int n = 1;
  return n;
}
double Median(std::vector<double> v, int last) {
  if (v.empty()) return 0.0;
  if (static_cast<int>(v.size()) > last) v.erase(v.begin(), v.end() - last);
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Record(benchmark::State& state, const std::string& variant, int64_t bytes, double seconds) {
  int64_t total = bytes * static_cast<int64_t>(state.iterations());
  state.SetBytesProcessed(total);
  double gbps = seconds > 0 ? static_cast<double>(total) / seconds / 1e9 : 0.0;
  state.counters["GB/s"] = gbps;
  Results()[variant][bytes].push_back(gbps);
}

// ---- plain loopback socket copy

struct PlainLink {
  int tx = -1, rx = -1;
  std::thread receiver;

  PlainLink() {
    int ls = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(ls, 1);
    socklen_t len = sizeof(a);
    ::getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len);
    tx = ::socket(AF_INET, SOCK_STREAM, 0);
    ::connect(tx, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    rx = ::accept(ls, nullptr, nullptr);
    ::close(ls);
    int one = 1;
    ::setsockopt(tx, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ::setsockopt(rx, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    receiver = std::thread([this] {
      for (;;) {
        uint64_t n = 0;
        if (!RecvAll(rx, &n, sizeof(n))) return;
        if (!RecvAll(rx, Dst().data(), n)) return;
        char ack = 1;
        if (::send(rx, &ack, 1, MSG_NOSIGNAL) != 1) return;
      }
    });
  }
  ~PlainLink() {
    ::shutdown(tx, SHUT_RDWR);
    receiver.join();
    ::close(tx);
    ::close(rx);
  }
  static bool RecvAll(int fd, void* p, uint64_t n) {
    auto* c = static_cast<char*>(p);
    while (n > 0) {
      ssize_t r = ::recv(fd, c, n, 0);
      if (r <= 0) return false;
      c += r;
      n -= static_cast<uint64_t>(r);
    }
    return true;
  }
  static bool SendAll(int fd, const void* p, uint64_t n) {
    auto* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      c += w;
      n -= static_cast<uint64_t>(w);
    }
    return true;
  }
  bool Copy(uint64_t n) {
    char ack = 0;
    return SendAll(tx, &n, sizeof(n)) && SendAll(tx, Src().data(), n) && RecvAll(tx, &ack, 1);
  }
};

void BM_PlainSocket(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  PlainLink link;
  double seconds = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    if (!link.Copy(bytes)) state.SkipWithError("plain socket copy failed");
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    state.SetIterationTime(s);
    seconds += s;
  }
  Record(state, "plain socket", bytes, seconds);
}

// ---- the transfer agent

struct AgentPair {
  std::unique_ptr<Agent> src, dst;
  Registration src_reg, dst_reg;

  AgentPair(const std::string& backend, int num_connections) {
    AgentOptions o;
    o.name = "bench-prefill";
    o.backends = {backend};
    if (backend == "tcp") o.backend_params["tcp"] = {{"num_connections", std::to_string(num_connections)}};
    src = std::move(Agent::Create(o).value());
    o.name = "bench-decode";
    dst = std::move(Agent::Create(o).value());
    src_reg = std::move(src->RegisterMemory(Src().data(), Src().size()).value());
    dst_reg = std::move(dst->RegisterMemory(Dst().data(), Dst().size()).value());
    (void)src->LoadPeerMetadata(dst->ExportMetadata()).value();
  }
};

void RunAgent(benchmark::State& state, const std::string& backend, int num_connections, const std::string& variant) {
  const int64_t bytes = state.range(0);
  AgentPair pair(backend, num_connections);
  DescList l, r;
  for (int64_t off = 0; off < bytes; off += kBlockBytes) {
    int64_t n = std::min(kBlockBytes, bytes - off);
    l.Add(Src().data() + off, n);
    r.Add(Dst().data() + off, n);
  }
  double seconds = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    auto h = pair.src->Post(Op::kWrite, l, r, "bench-decode");
    if (!h.ok() || !h->Wait().ok()) {
      state.SkipWithError("transfer failed");
      break;
    }
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    state.SetIterationTime(s);
    seconds += s;
  }
  state.counters["regions"] = 1;
  Record(state, variant, bytes, seconds);
}

void BM_TcpBackend(benchmark::State& state) {
  int conns = static_cast<int>(state.range(1));
  RunAgent(state, "tcp", conns, "tcp backend x" + std::to_string(conns));
}
void BM_LocalBackend(benchmark::State& state) { RunAgent(state, "local", 1, "local backend"); }
#ifdef TANDEM_HAVE_UCX
void BM_UcxBackend(benchmark::State& state) { RunAgent(state, "ucx", 1, "ucx backend"); }
#endif
#ifdef TANDEM_HAVE_LIBFABRIC
void BM_LibfabricBackend(benchmark::State& state) { RunAgent(state, "libfabric", 1, "libfabric backend"); }
#endif

// Registered size by size, each variant beside the others, so that load changes on a shared
// machine hit them alike.
void RegisterAll() {
  for (int64_t tokens : {int64_t{1}, int64_t{16}, int64_t{455}, int64_t{1800}}) {
    int64_t bytes = tokens == 455 ? int64_t{64} << 20 : tokens * kTokenBytes;
    benchmark::RegisterBenchmark("BM_PlainSocket", BM_PlainSocket)->Arg(bytes)->UseManualTime()->Unit(benchmark::kMicrosecond);
    for (int c : {1, 2, 4}) {
      benchmark::RegisterBenchmark("BM_TcpBackend", BM_TcpBackend)
          ->Args({bytes, c})
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
#ifdef TANDEM_HAVE_UCX
    benchmark::RegisterBenchmark("BM_UcxBackend", BM_UcxBackend)->Arg(bytes)->UseManualTime()->Unit(benchmark::kMicrosecond);
#endif
#ifdef TANDEM_HAVE_LIBFABRIC
    benchmark::RegisterBenchmark("BM_LibfabricBackend", BM_LibfabricBackend)
        ->Arg(bytes)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
#endif
    benchmark::RegisterBenchmark("BM_LocalBackend", BM_LocalBackend)->Arg(bytes)->UseManualTime()->Unit(benchmark::kMicrosecond);
  }
}

void PrintTable() {
  auto& res = Results();
  auto it = res.find("plain socket");
  if (it == res.end()) return;
  std::printf("\nGB/s (1e9 B/s) and ratio to the plain loopback socket copy, same run\n");
  std::printf("%-12s %12s", "bytes", "plain");
  for (const auto& [variant, m] : res) {
    if (variant != "plain socket") std::printf(" %26s", variant.c_str());
  }
  std::printf("\n");
  for (const auto& [bytes, plain_runs] : it->second) {
    double plain = Median(plain_runs, Repetitions());
    std::printf("%-12lld %12.2f", static_cast<long long>(bytes), plain);
    for (const auto& [variant, m] : res) {
      if (variant == "plain socket") continue;
      auto v = m.find(bytes);
      if (v == m.end()) {
        std::printf(" %26s", "-");
      } else {
        double g = Median(v->second, Repetitions());
        std::printf(" %17.2f (x%5.2f)", g, plain > 0 ? g / plain : 0.0);
      }
    }
    std::printf("\n");
  }
}

}  // namespace
}  // namespace tandem::transfer

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--benchmark_repetitions=", 24) == 0) {
      tandem::transfer::Repetitions() = std::max(1, std::atoi(argv[i] + 24));
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  tandem::transfer::Src();
  tandem::transfer::Dst();
  tandem::transfer::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  tandem::transfer::PrintTable();
  return 0;
}
