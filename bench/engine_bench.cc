// CPU engine throughput on the bundled tiny Qwen3: prefill and decode tokens/s at batch 1 and 16.
//
//   build/engine_bench [--benchmark_filter=...]
//
// Prefill: B prompts of 128 distinct tokens, max_tokens 1, prefix caching off (every iteration
// computes every prompt token); rate = prompt tokens / s.
// Decode: B prompts of 16 tokens, 64 generated tokens each (ignore_eos); the clock runs over decode
// steps only; rate = generated tokens / s across the batch.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "common/file_util.h"
#include "engine/engine.h"

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
  const int prompt_len = 128;
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

BENCHMARK(BM_Prefill)->Arg(1)->Arg(16)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode)->Arg(1)->Arg(16)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem

BENCHMARK_MAIN();
