// Agent::Post's own cost (issue 7): validation, coalescing, pinning and completion of one WRITE of
// Qwen3-8B-shaped KV descriptors (36 layers, 64 KiB blocks: 1 and 113 blocks per layer, i.e. 1 and
// 1800 tokens), with a backend that completes every request at once on the posting thread, so
// nothing but the agent is timed. Host memory (no device needed); the descriptors are what the
// prefill worker posts.
//
//   build/bench/agent_post_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <vector>

#include "transfer/agent.h"

namespace tandem::transfer {
namespace {

constexpr int kLayers = 36;
constexpr uint64_t kBlockBytes = 64 << 10;
constexpr int kBlocksPerLayer = 128;

// Completes each request when posted.
class InstantBackend final : public Backend {
 public:
  explicit InstantBackend(BackendHost& host) : host_(host) {}
  const std::string& name() const override {
    static const std::string kName = "instant";
    return kName;
  }
  BackendCapabilities capabilities() const override {
    BackendCapabilities c;
    c.host_memory = true;
    c.same_process = c.same_node = c.remote = true;
    c.priority = 100;
    return c;
  }
  std::string ConnectionInfo() const override { return host_.instance_id(); }
  Status LoadPeer(const AgentMetadata&) override { return Status::Ok(); }
  void InvalidatePeer(const std::string&) override {}
  Status Post(std::shared_ptr<TransferRequest> request) override {
    request->Complete(Status::Ok());
    return Status::Ok();
  }
  void Shutdown() override {}

 private:
  BackendHost& host_;
};

struct Setup {
  std::unique_ptr<Agent> initiator, target;
  std::vector<uint8_t> src, dst;
  std::vector<Registration> regs;
  DescList local, remote;
};

Setup Make(int blocks) {
  RegisterBackendFactory("instant", [](BackendHost& host, const BackendParams&) -> Result<std::unique_ptr<Backend>> {
    return std::unique_ptr<Backend>(std::make_unique<InstantBackend>(host));
  });
  Setup s;
  auto agent = [](const char* name) {
    AgentOptions o;
    o.name = name;
    o.backends = {"instant"};
    return std::move(Agent::Create(o).value());
  };
  s.initiator = agent("prefill");
  s.target = agent("decode");
  const uint64_t layer_bytes = kBlocksPerLayer * kBlockBytes;
  s.src.resize(kLayers * layer_bytes);
  s.dst.resize(kLayers * layer_bytes);
  // One registration per layer, as the workers register their KV pools.
  for (int l = 0; l < kLayers; ++l) {
    s.regs.push_back(std::move(s.initiator->RegisterMemory(s.src.data() + l * layer_bytes, layer_bytes).value()));
    s.regs.push_back(std::move(s.target->RegisterMemory(s.dst.data() + l * layer_bytes, layer_bytes).value()));
  }
  (void)s.initiator->LoadPeerMetadata(s.target->ExportMetadata()).value();
  for (int l = 0; l < kLayers; ++l) {
    for (int b = 0; b < blocks; ++b) {
      const uint64_t off = l * layer_bytes + b * kBlockBytes;
      s.local.Add(s.src.data() + off, kBlockBytes);
      s.remote.Add(s.dst.data() + off, kBlockBytes);
    }
  }
  return s;
}

void BM_PostWrite(benchmark::State& state) {
  Setup s = Make(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    auto h = s.initiator->Post(Op::kWrite, s.local, s.remote, "decode", "req");
    if (!h.ok() || !h->Wait().ok()) state.SkipWithError("post failed");
  }
  state.counters["descriptors"] = static_cast<double>(s.local.descs.size());
}
BENCHMARK(BM_PostWrite)->Arg(1)->Arg(8)->Arg(113)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tandem::transfer

BENCHMARK_MAIN();
