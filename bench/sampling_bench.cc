// The host sampler (kernels/cpu/sample.h: temperature -> min-p -> top-k -> top-p -> one draw) on
// one row of Qwen3's vocabulary (151,936 logits), as the CPU engine runs it for every sampled
// token: greedy, temperature 1 alone, Qwen3's generation_config defaults (temperature 0.6,
// top-k 20, top-p 0.95), and top-p 0.9 alone. Logits: N(0, 3) from a fixed seed.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/cpu/sample.h"

namespace {

std::vector<float> Logits() {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(151936);
  for (float& x : v) x = d(rng);
  return v;
}

void Run(benchmark::State& state, tandem::cpu::SampleSpec spec) {
  const std::vector<float> logits = Logits();
  double u = 0.1;
  for (auto _ : state) {
    benchmark::DoNotOptimize(tandem::cpu::SampleWithUniform(logits, spec, u));
    u = u < 0.9 ? u + 0.1 : 0.05;
  }
}

void BM_SampleGreedy(benchmark::State& s) { Run(s, {0.0f, 1.0f, 0, 0.0f}); }
void BM_SampleTemperature1(benchmark::State& s) { Run(s, {1.0f, 1.0f, 0, 0.0f}); }
void BM_SampleQwen3Defaults(benchmark::State& s) { Run(s, {0.6f, 0.95f, 20, 0.0f}); }
void BM_SampleTopP09(benchmark::State& s) { Run(s, {1.0f, 0.9f, 0, 0.0f}); }
BENCHMARK(BM_SampleGreedy)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleTemperature1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleQwen3Defaults)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleTopP09)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
