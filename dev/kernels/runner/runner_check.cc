// cuda_runner_check: the CUDA ModelRunner against the CPU reference runner on one model directory
// (default: the bundled tiny-qwen3). Same KV layout and block tables for both; steps:
//   1. prefill of two prompts in one batch (all logits of one, the last of the other),
//   2. a third prompt whose first 32 tokens are the first prompt's, cached: its block table reuses
//      the first prompt's two blocks and the slice starts at position 32 (prefix-cache hit),
//   3. greedy decode of the three sequences together for a few steps (tokens from the CPU runner).
// Prints the relative logit error (||gpu - cpu|| / ||cpu|| per row, the worst) and whether the
// argmax agrees, per step. Exit 0 when every row is within tolerance and argmaxes agree (or the CPU's
// top two are within the error), 1 otherwise, 2 on an error, 77 with no CUDA device.
// Usage: cuda_runner_check [MODEL_DIR] [--steps N]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "model/cuda_model_runner.h"
#include "model/model_runner.h"

namespace tandem {
namespace {

constexpr int kBlockSize = 16;
constexpr double kTolerance = 3e-2;  // bf16 weights, activations and KV through every layer

struct Seq {
  std::vector<int32_t> tokens;  // all tokens so far
  std::vector<int32_t> table;   // block ids
};

int Argmax(const float* v, int n) { return static_cast<int>(std::max_element(v, v + n) - v); }

int failures = 0;

void CompareStep(const char* step, const std::vector<float>& cpu, const std::vector<float>& gpu,
                 int vocab) {
  const int rows = static_cast<int>(cpu.size() / vocab);
  double worst = 0;
  int argmax_diff = 0, argmax_excused = 0;
  for (int r = 0; r < rows; ++r) {
    const float* c = cpu.data() + static_cast<size_t>(r) * vocab;
    const float* g = gpu.data() + static_cast<size_t>(r) * vocab;
    double d2 = 0, c2 = 0;
    for (int i = 0; i < vocab; ++i) {
      const double d = static_cast<double>(g[i]) - c[i];
      d2 += std::isfinite(g[i]) ? d * d : INFINITY;
      c2 += static_cast<double>(c[i]) * c[i];
    }
    const double rel = std::sqrt(d2 / c2);
    worst = std::max(worst, rel);
    const int ac = Argmax(c, vocab), ag = Argmax(g, vocab);
    if (ac != ag) {
      // Excused when the CPU's own margin between the two is inside the GPU's error on them.
      const double margin = std::fabs(c[ac] - c[ag]);
      const double err = std::fabs(g[ac] - c[ac]) + std::fabs(g[ag] - c[ag]);
      (margin <= err ? argmax_excused : argmax_diff) += 1;
    }
  }
  const bool ok = worst <= kTolerance && argmax_diff == 0;
  if (!ok) ++failures;
  std::printf("%-4s %-34s rows %3d  worst rel %.2e (tol %.0e)  argmax differs %d (+%d near-ties)\n",
              ok ? "ok" : "FAIL", step, rows, worst, kTolerance, argmax_diff, argmax_excused);
}

int Run(const std::string& model_dir, int steps) {
  auto cpu_or = LoadCpuModelRunner(model_dir);
  if (!cpu_or.ok()) {
    std::fprintf(stderr, "cpu runner: %s\n", cpu_or.status().ToString().c_str());
    return 2;
  }
  auto gpu_or = LoadCudaModelRunner(model_dir, 0);
  if (!gpu_or.ok()) {
    std::fprintf(stderr, "cuda runner: %s\n", gpu_or.status().ToString().c_str());
    return 2;
  }
  ModelRunner& cpu = **cpu_or;
  ModelRunner& gpu = **gpu_or;
  const ModelConfig& c = cpu.config();
  const int num_blocks = 64;
  for (ModelRunner* r : {&cpu, &gpu}) {
    Status st = r->AllocateKVCache(num_blocks, kBlockSize);
    if (!st.ok()) {
      std::fprintf(stderr, "AllocateKVCache: %s\n", st.ToString().c_str());
      return 2;
    }
  }
  std::printf("model %s: %d layers, hidden %d, heads %d/%d, head_dim %d, vocab %d\n",
              c.architecture.c_str(), c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
              c.num_key_value_heads, c.head_dim, c.vocab_size);
  std::mt19937 rng(1234);
  std::vector<int32_t> free_blocks(num_blocks);
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  auto take_block = [&] {
    const int32_t b = free_blocks.back();
    free_blocks.pop_back();
    return b;
  };
  auto random_tokens = [&](int n) {
    std::vector<int32_t> t(n);
    for (int32_t& x : t) x = std::uniform_int_distribution<int32_t>(0, std::min(c.vocab_size, 50000) - 1)(rng);
    return t;
  };
  auto grow = [&](Seq& s, size_t len) {
    while (s.table.size() * kBlockSize < len) s.table.push_back(take_block());
  };
  auto forward = [&](const ForwardBatch& batch, const char* step) {
    std::vector<float> lc, lg;
    Status a = cpu.Forward(batch, &lc), b = gpu.Forward(batch, &lg);
    if (!a.ok() || !b.ok()) {
      std::fprintf(stderr, "%s: cpu %s, gpu %s\n", step, a.ToString().c_str(), b.ToString().c_str());
      std::exit(2);
    }
    CompareStep(step, lc, lg, c.vocab_size);
    return lc;
  };

  std::vector<Seq> seqs(3);
  seqs[0].tokens = random_tokens(45);
  seqs[1].tokens = random_tokens(23);
  grow(seqs[0], 45);
  grow(seqs[1], 23);
  ForwardBatch prefill;
  prefill.seqs.push_back({seqs[0].tokens, 0, seqs[0].table, SequenceSlice::Logits::kAll});
  prefill.seqs.push_back({seqs[1].tokens, 0, seqs[1].table, SequenceSlice::Logits::kLast});
  std::vector<float> last = forward(prefill, "prefill 45 (all logits) + 23");
  std::vector<int32_t> next = {Argmax(last.data() + 44L * c.vocab_size, c.vocab_size),
                               Argmax(last.data() + 45L * c.vocab_size, c.vocab_size)};

  // Sequence 2: the first 32 tokens (two full blocks) of sequence 0 are cached.
  seqs[2].tokens.assign(seqs[0].tokens.begin(), seqs[0].tokens.begin() + 32);
  const std::vector<int32_t> tail = random_tokens(19);
  seqs[2].tokens.insert(seqs[2].tokens.end(), tail.begin(), tail.end());
  seqs[2].table = {seqs[0].table[0], seqs[0].table[1]};
  grow(seqs[2], seqs[2].tokens.size());
  ForwardBatch chunk;
  chunk.seqs.push_back({std::span<const int32_t>(seqs[2].tokens).subspan(32), 32, seqs[2].table,
                        SequenceSlice::Logits::kAll});
  last = forward(chunk, "prefix hit: 32 cached + 19 new");
  next.push_back(Argmax(last.data() + 18L * c.vocab_size, c.vocab_size));

  for (int step = 0; step < steps; ++step) {
    ForwardBatch decode;
    for (int s = 0; s < 3; ++s) {
      seqs[s].tokens.push_back(next[s]);
      grow(seqs[s], seqs[s].tokens.size());
    }
    for (int s = 0; s < 3; ++s) {
      const int pos = static_cast<int>(seqs[s].tokens.size()) - 1;
      decode.seqs.push_back({std::span<const int32_t>(seqs[s].tokens).subspan(pos), pos,
                             seqs[s].table, SequenceSlice::Logits::kLast});
    }
    char name[64];
    std::snprintf(name, sizeof(name), "decode step %d (3 seqs)", step + 1);
    last = forward(decode, name);
    for (int s = 0; s < 3; ++s) next[s] = Argmax(last.data() + static_cast<size_t>(s) * c.vocab_size, c.vocab_size);
  }
  std::printf("%s\n", failures == 0 ? "cuda_runner_check: all steps within tolerance"
                                    : "cuda_runner_check: FAILED");
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  std::string model_dir = TANDEM_DEFAULT_MODEL_DIR;
  int steps = 4;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else {
      model_dir = argv[i];
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("cuda_runner_check: no CUDA device\n");
    return 77;
  }
  return tandem::Run(model_dir, steps);
}
