// cpu::Linear alone (kernels/cpu/matmul.h) on the bundled tiny Qwen3's shapes, bf16 weights: the
// lm_head (151936 x 256) and a layer's gate projection (768 x 256), at m = 1, 4, 16 and 128, the gate
// and down (256 x 768) projections at the CPU runner's token blocks (m = 32, 64) and at 2048, and two
// of Qwen3-8B's projections (4096 x 4096, 4096 x 12288) at m = 128 and 512; threads 1 and 2, each ISA.
//
//   build/bench/linear_bench [--benchmark_filter=...]
//
// Counters: weight bytes/s read (n * k * 2 per call) and GFLOP/s (2 m n k per call).
#include <cstdint>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "kernels/cpu/matmul.h"

namespace tandem::cpu {
namespace {

void BM_Linear(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), k = static_cast<int>(state.range(1));
  const int m = static_cast<int>(state.range(2)), threads = static_cast<int>(state.range(3));
  const auto isa = static_cast<LinearIsa>(state.range(4));
  if (!SetLinearIsaForTesting(isa)) {
    state.SkipWithError("this CPU lacks the ISA");
    return;
  }
  SetLinearThreads(threads);
  std::mt19937 rng(1);
  std::vector<uint16_t> w(static_cast<size_t>(n) * k);
  for (uint16_t& v : w) v = static_cast<uint16_t>(0x3c00 + (rng() & 0x7ff));  // bf16 in [2^-7, 2^-5)
  std::vector<float> x(static_cast<size_t>(m) * k, 0.5f), y(static_cast<size_t>(m) * n);
  const WeightMatrix wm{WeightType::kBF16, w.data(), n, k};
  for (auto _ : state) {
    Linear(x.data(), m, wm, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  const double calls = static_cast<double>(state.iterations());
  state.counters["weight_bytes/s"] = benchmark::Counter(calls * n * k * 2, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(calls * 2.0 * m * n * k * 1e-9, benchmark::Counter::kIsRate);
  SetLinearIsaForTesting(LinearIsa::kAuto);
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (const int isa : {static_cast<int>(LinearIsa::kAvx512), static_cast<int>(LinearIsa::kAvx2),
                        static_cast<int>(LinearIsa::kScalar)}) {
    for (const int threads : {1, 2}) {
      for (const int m : {1, 4, 16, 128}) {
        b->Args({151936, 256, m, threads, isa});
        b->Args({768, 256, m, threads, isa});
      }
      // The engine's token blocks (32, 64 rows) and a 2048-token step's gate and down projections.
      for (const int m : {32, 64, 2048}) {
        b->Args({768, 256, m, threads, isa});
        b->Args({256, 768, m, threads, isa});
      }
      // Qwen3-8B's o_proj and down_proj (larger k), at prefill sizes.
      for (const int m : {128, 512}) {
        b->Args({4096, 4096, m, threads, isa});
        b->Args({4096, 12288, m, threads, isa});
      }
    }
  }
  b->ArgNames({"n", "k", "m", "threads", "isa"});
}

BENCHMARK(BM_Linear)->Apply(Shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tandem::cpu

BENCHMARK_MAIN();
