// CPU engine throughput on the bundled tiny Qwen3: prefill and decode tokens/s, beside the
// machine's memory read bandwidth and the decode floor it implies (issue 29).
//
//   build/bench/engine_bench [--benchmark_filter=...]
//
// Prefill/B/L: B prompts of L distinct tokens (1x128, 16x128, 1x512; 1x32 and 1x64 around the CPU
// runner's switch from one operation at a time to token blocks), max_tokens 1, prefix caching
// off (every iteration computes every prompt token); rate = prompt tokens / s of wall time.
// Decode/B: B prompts of 16 tokens, 64 generated tokens each (ignore_eos); the clock runs over
// decode steps only (63 per sequence); rate = generated tokens / s across the batch.
// ReadBandwidth: UsableCores() threads (what the engine sizes its threads from) sum disjoint
// slices of a 1 GiB float buffer, far beyond any L3; read_bytes/s is that rate,
// weight_bytes/token the bf16 bytes of every matrix a decode step streams (each layer's
// q/k/v/o/gate/up/down and the lm_head; norms and the one embedding row left out), and
// floor_tokens/s = read_bytes/s / weight_bytes/token, the batch-1 decode rate that this
// machine's memory allows at best.
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "common/cpu_cores.h"
#include "common/file_util.h"
#include "engine/engine.h"
#include "model/config.h"

namespace tandem {
namespace {

std::unique_ptr<Engine> MakeEngine(int max_num_seqs) {
  auto runner = LoadCpuModelRunner(DefaultModelDir());
  if (!runner.ok()) return nullptr;
  EngineConfig config;
  config.max_num_seqs = max_num_seqs;
  config.max_num_batched_tokens = 4096;
  config.enable_prefix_caching = false;
  auto engine = Engine::Create(std::move(runner).value(), nullptr, config);
  return engine.ok() ? std::move(engine).value() : nullptr;
}

std::vector<int32_t> Prompt(int length, int salt) {
  std::vector<int32_t> ids(length);
  for (int i = 0; i < length; ++i) ids[i] = 1000 + (i * 7919 + salt * 104729) % 50000;
  return ids;
}

void RunToCompletion(Engine& engine) {
  while (engine.HasUnfinishedRequests()) benchmark::DoNotOptimize(engine.Step());
}

void BM_Prefill(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const int prompt_len = static_cast<int>(state.range(1));
  auto engine = MakeEngine(batch);
  if (!engine) {
    state.SkipWithError("cannot load the bundled model");
    return;
  }
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = 1;
  int round = 0;
  for (auto _ : state) {
    for (int b = 0; b < batch; ++b) {
      Status s = engine->AddRequest("p" + std::to_string(round) + "-" + std::to_string(b),
                                    Prompt(prompt_len, round * batch + b), params);
      if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    }
    RunToCompletion(*engine);
    ++round;
  }
  state.counters["tokens/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * batch * prompt_len, benchmark::Counter::kIsRate);
}

void BM_Decode(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const int prompt_len = 16, output_len = 64;
  auto engine = MakeEngine(batch);
  if (!engine) {
    state.SkipWithError("cannot load the bundled model");
    return;
  }
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = output_len;
  params.ignore_eos = true;
  int round = 0;
  int64_t decoded = 0;
  for (auto _ : state) {
    for (int b = 0; b < batch; ++b) {
      Status s = engine->AddRequest("d" + std::to_string(round) + "-" + std::to_string(b),
                                    Prompt(prompt_len, round * batch + b), params);
      if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    }
    benchmark::DoNotOptimize(engine->Step());  // prefill of all prompts + first token
    auto start = std::chrono::steady_clock::now();
    RunToCompletion(*engine);
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    decoded += static_cast<int64_t>(batch) * (output_len - 1);
    ++round;
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(decoded), benchmark::Counter::kIsRate);
}

// Bytes of bf16 weights one decode step reads: every linear layer's matrix and the lm_head.
double DecodeWeightBytes(const ModelConfig& c) {
  const double q = static_cast<double>(c.num_attention_heads) * c.head_dim;
  const double kv = static_cast<double>(c.num_key_value_heads) * c.head_dim;
  const double layer = c.hidden_size * (2 * q + 2 * kv) + 3.0 * c.hidden_size * c.intermediate_size;
  return 2.0 * (c.num_hidden_layers * layer + static_cast<double>(c.vocab_size) * c.hidden_size);
}

// Eight independent 16-byte accumulators: enough loads in flight to saturate memory with baseline
// SSE2 (a 32-byte vector type without AVX is lowered through the stack and reads slower).
float SumFloats(const float* p, size_t n) {
  typedef float V4 __attribute__((vector_size(16)));
  V4 acc[8] = {};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int j = 0; j < 8; ++j) {
      V4 x;
      std::memcpy(&x, p + i + 4 * j, sizeof x);
      acc[j] += x;
    }
  }
  float sum = 0.0f;
  for (const V4& a : acc) sum += a[0] + a[1] + a[2] + a[3];
  for (; i < n; ++i) sum += p[i];
  return sum;
}

void BM_ReadBandwidth(benchmark::State& state) {
  auto config = LoadModelConfig(DefaultModelDir());
  if (!config.ok()) {
    state.SkipWithError("cannot read the bundled model's config.json");
    return;
  }
  const size_t n = size_t{1} << 28;    // 1 GiB of floats
  std::vector<float> buffer(n, 1.0f);  // every page touched before the clock runs
  const int threads = UsableCores();
  std::vector<float> sums(threads);
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t begin = n * t / threads, end = n * (t + 1) / threads;
        sums[t] = SumFloats(buffer.data() + begin, end - begin);
      });
    }
    for (std::thread& thread : pool) thread.join();
    benchmark::DoNotOptimize(sums.data());
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double bytes = static_cast<double>(state.iterations()) * n * sizeof(float);
  const double per_token = DecodeWeightBytes(config.value());
  state.counters["threads"] = threads;
  state.counters["read_bytes/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsRate);
  state.counters["weight_bytes/token"] = per_token;
  state.counters["floor_tokens/s"] =
      benchmark::Counter(bytes / per_token, benchmark::Counter::kIsRate);
}

// Wall time, not the default CPU time: the engine's work runs on other threads too.
BENCHMARK(BM_Prefill)
    ->Args({1, 128})
    ->Args({16, 128})
    ->Args({1, 512})
    ->Args({1, 32})
    ->Args({1, 64})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode)->Arg(1)->Arg(16)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReadBandwidth)->UseManualTime()->MinTime(1.0)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem

BENCHMARK_MAIN();
