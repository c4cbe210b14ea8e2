// The ceiling of the edge: requests/s and latency of the HTTP + OpenAI layer over the echo engine
// (no model), streaming and not, beside the echo engine called directly in the same run, so
// "added latency" = HTTP latency - direct latency.
//
//   build/bench/http_bench
//
// Each HTTP benchmark thread holds one keep-alive connection to an in-process server on 127.0.0.1
// and sends POST /v1/completions {"prompt": "The jury said", "max_tokens": 16, "stream": S}.
// Counters: req/s (all threads), p50_us / p99_us (per-thread latency percentiles, averaged).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/file_util.h"
#include "common/logging.h"
#include "engine/echo_engine.h"
#include "frontend/http_server.h"
#include "frontend/openai_server.h"

namespace tandem {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using Clock = std::chrono::steady_clock;

constexpr int kMaxTokens = 16;

struct Edge {
  std::shared_ptr<const Tokenizer> tokenizer;
  std::shared_ptr<EchoEngineClient> engine;
  std::unique_ptr<http::HttpServer> server;
  std::shared_ptr<OpenAIService> service;
  metrics::Registry registry;
};

Edge& GetEdge() {
  static Edge* edge = [] {
    auto* e = new Edge;
    e->tokenizer = *Tokenizer::Load(DefaultModelDir());
    e->engine = std::make_shared<EchoEngineClient>(e->tokenizer, ServedModelInfo{"echo", 4096, 151936});
    http::HttpServer::Options options;
    options.port = 0;
    options.num_threads = 2;
    e->server = std::make_unique<http::HttpServer>(options);
    OpenAIServiceOptions service_options;
    service_options.served_model_name = "echo";
    e->service = std::make_shared<OpenAIService>(e->engine, e->tokenizer, nullptr, service_options,
                                                 &e->registry);
    e->service->Register([&](std::string m, std::string p, http::Handler h) {
      e->server->Route(std::move(m), std::move(p), std::move(h));
    });
    e->service->SetReady(true);
    if (!e->server->Start().ok()) std::abort();
    return e;
  }();
  return *edge;
}

void Percentiles(benchmark::State& state, std::vector<double>& us) {
  if (us.empty()) return;
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[std::min(us.size() - 1, static_cast<size_t>(q * us.size()))]; };
  state.counters["p50_us"] = benchmark::Counter(at(0.50), benchmark::Counter::kAvgThreads);
  state.counters["p99_us"] = benchmark::Counter(at(0.99), benchmark::Counter::kAvgThreads);
}

// The echo engine alone: submit, wait for the final output.
void BM_EchoEngineDirect(benchmark::State& state) {
  Edge& edge = GetEdge();
  auto prompt = edge.tokenizer->Encode("The jury said");
  std::vector<double> us;
  int64_t n = 0;
  for (auto _ : state) {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    GenerateRequest r{"direct-" + std::to_string(state.thread_index()) + "-" + std::to_string(n++),
                      prompt, {}, {}};
    r.params.max_tokens = kMaxTokens;
    auto start = Clock::now();
    Status st = edge.engine->Submit(std::move(r), [&](RequestOutput out) {
      if (!out.finished) return;
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      cv.notify_one();
    });
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  state.counters["req/s"] = benchmark::Counter(static_cast<double>(state.iterations()),
                                               benchmark::Counter::kIsRate);
  Percentiles(state, us);
}

void BM_HttpCompletions(benchmark::State& state) {
  const bool stream = state.range(0) != 0;
  Edge& edge = GetEdge();
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  socket.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(edge.server->port())});
  socket.set_option(asio::ip::tcp::no_delay(true));
  bhttp::request<bhttp::string_body> req{bhttp::verb::post, "/v1/completions", 11};
  req.set(bhttp::field::host, "127.0.0.1");
  req.set(bhttp::field::content_type, "application/json");
  req.body() = std::string(R"({"model":"echo","prompt":"The jury said","max_tokens":)") +
               std::to_string(kMaxTokens) + (stream ? R"(,"stream":true})" : "}");
  req.prepare_payload();
  beast::flat_buffer buffer;
  std::vector<double> us;
  for (auto _ : state) {
    auto start = Clock::now();
    bhttp::write(socket, req);
    bhttp::response<bhttp::string_body> res;
    bhttp::read(socket, buffer, res);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    if (res.result_int() != 200) {
      state.SkipWithError(("HTTP " + std::to_string(res.result_int()) + ": " + res.body()).c_str());
      break;
    }
  }
  state.counters["req/s"] = benchmark::Counter(static_cast<double>(state.iterations()),
                                               benchmark::Counter::kIsRate);
  Percentiles(state, us);
}

BENCHMARK(BM_EchoEngineDirect)->UseRealTime()->Unit(benchmark::kMicrosecond)->Threads(1)->Threads(8);
BENCHMARK(BM_HttpCompletions)->ArgName("stream")->Arg(0)->Arg(1)->UseRealTime()
    ->Unit(benchmark::kMicrosecond)->Threads(1)->Threads(8)->Threads(32);

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);  // no per-request log lines in the measurement
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
