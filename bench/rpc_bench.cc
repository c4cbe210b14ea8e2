// The decode -> prefill worker call's own cost (issue 7's disaggregated TTFT): one
// Worker.RemotePrefill over real gRPC on 127.0.0.1, shaped like a 2048-token Qwen3-8B request
// (2048 prompt tokens, 128 block ids, 36 layer bases, ~9 KB of agent metadata), against a
// WorkerServer whose handler answers at once (on the gRPC thread, or from another thread, as the
// prefill worker's transfer thread does). Time per call = the round trip as the decode worker's
// RemotePrefillClient sees it, less nothing: what the two hops add to TTFT.
//
//   build/bench/rpc_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>

#include "discovery/file_discovery.h"
#include "engine/echo_engine.h"
#include "rpc/remote_prefill_client.h"
#include "rpc/worker_server.h"

namespace tandem::runtime {
namespace {

using namespace std::chrono_literals;

// Answers each prefill with first token 7, on the calling (gRPC) thread or on its own thread.
class InstantHandler final : public RemotePrefillHandler {
 public:
  explicit InstantHandler(bool own_thread) : own_thread_(own_thread) {
    if (own_thread_) thread_ = std::thread([this] { Loop(); });
  }
  ~InstantHandler() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void Prefill(RemotePrefillRequest, RemotePrefillDone done) override {
    if (!own_thread_) return Answer(done);
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(done));
    }
    cv_.notify_one();
  }
  void Cancel(const std::string&) override {}

 private:
  static void Answer(const RemotePrefillDone& done) {
    RemotePrefillResult r;
    r.first_token_id = 7;
    r.num_blocks_written = 128;
    done(r);
  }
  void Loop() {
    for (;;) {
      RemotePrefillDone done;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        done = std::move(queue_.front());
        queue_.pop_front();
      }
      Answer(done);
    }
  }
  const bool own_thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RemotePrefillDone> queue_;
  bool stop_ = false;
  std::thread thread_;
};

void BM_RemotePrefillRoundTrip(benchmark::State& state) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("tandem-rpc-bench-" + std::to_string(getpid()));
  fs::remove_all(root);
  std::shared_ptr<Discovery> discovery = MakeFileDiscovery({root.string(), 3000ms, 1000ms});
  auto engine = std::make_shared<EchoEngineClient>(nullptr, ServedModelInfo{"m", 4096, 50});
  WorkerServerOptions so{"127.0.0.1", 0};
  so.remote_prefill = std::make_shared<InstantHandler>(state.range(0) == 1);
  auto server = std::make_unique<WorkerServer>(engine, so);
  if (!server->Start().ok()) return state.SkipWithError("server");
  InstanceInfo info;
  info.namespace_name = "rpc";
  info.component = kComponentPrefill;
  info.instance_id = "p0";
  info.endpoint = server->endpoint();
  info.metadata = {{"model", "m"}};
  auto lease = discovery->Register(info);
  RemotePrefillClientOptions o;
  o.namespace_name = "rpc";
  o.served_model_name = "m";
  o.refresh_interval = 50ms;
  RemotePrefillClient client(discovery, o);
  for (int i = 0; i < 200 && client.num_workers() == 0; ++i) std::this_thread::sleep_for(10ms);

  RemotePrefillRequest r;
  r.prompt_token_ids.resize(2048);
  for (int i = 0; i < 2048; ++i) r.prompt_token_ids[i] = (i * 7919) % 151000;
  r.params.max_tokens = 1;
  r.target.agent_name = "decode";
  r.target.agent_metadata.assign(9000, 'm');
  r.target.layer_base.assign(36, 0x7f0000000000ull);
  r.target.block_bytes = 65536;
  r.target.block_size = 16;
  for (int i = 0; i < 128; ++i) r.target.block_ids.push_back(1000 + i);
  r.write_window = 5000ms;
  int n = 0;
  for (auto _ : state) {
    r.request_id = "r" + std::to_string(++n);
    std::promise<bool> p;
    client.Prefill(r, 5000ms, [&p](Result<RemotePrefillResult> res) { p.set_value(res.ok()); });
    if (!p.get_future().get()) {
      state.SkipWithError("call failed");
      break;
    }
  }
  lease->reset();
  server->Stop(200);
  fs::remove_all(root);
}
BENCHMARK(BM_RemotePrefillRoundTrip)->ArgName("answer_from_own_thread")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace tandem::runtime

BENCHMARK_MAIN();
