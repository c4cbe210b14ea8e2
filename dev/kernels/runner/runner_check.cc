// cuda_runner_check: the CUDA ModelRunner against the CPU reference runner on one model directory
// (default: the bundled tiny-qwen3). Same KV layout and block tables for both; steps:
//   1. prefill of two prompts in one batch (all logits of one, the last of the other),
//   2. a third prompt whose first 32 tokens are the first prompt's, cached: its block table reuses
//      the first prompt's two blocks and the slice starts at position 32 (prefix-cache hit),
//   3. greedy decode for a few steps (tokens from the CPU runner), batches of 1, 2, 3 sequences in
//      turn (decode-graph buckets 1, 2, 4, each replayed more than once).
// Prints the relative logit error (||gpu - cpu|| / ||cpu|| per row, the worst) and whether the
// argmax agrees, per step. Three CUDA runners take every step: decode graphs on (the default),
// TANDEM_CUDA_GRAPHS=pad (the same padded step run eagerly: must equal the graph bit for bit) and
// TANDEM_CUDA_GRAPHS=0 (unpadded eager: relative error <= 1e-2 against the graph). Execute's GPU
// picks (kArgmax with 5, 0 and no log-probabilities) must equal PickArgmax on the same runner's
// logits of the same step (token ids; log-probabilities within 1e-3). Sampled picks (kPick with a
// PickSpec: temperature, top-k, top-p, min-p, penalties, a token bitmask (structured outputs) on
// some rows, a seeded u per row, as the engine sends
// them) must equal PickToken (the host sampler) on the same logits with the same u, except where
// u * total lies within rounding of a cumulative boundary (counted; at most 1 per 100 picks); how
// often they equal the CPU runner's picks is printed. Exit 0 when everything holds
// (argmax differences excused when the CPU's top two are within the error), 1 otherwise, 2 on an
// error, 77 with no CUDA device.
// Usage: cuda_runner_check [MODEL_DIR] [--steps N] [--quantization fp8] [--kv-cache-dtype fp8] [--tol X]
// --kv-cache-dtype fp8: both runners keep an FP8 E4M3 KV cache (scale 1.0; the CPU's codes come
// from its fp32 K/V, CUDA's from bf16, so a code may differ by one step where they straddle a tie).
// --quantization fp8: both runners quantize the projections per channel at load (the same codes
// and scales: the CPU computes with their dequantized values, CUDA with the FP8 kernels).
#include <algorithm>
#include <chrono>
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
// bf16 weights, activations and KV through every layer; --tol changes it (FP8: the GEMM path's
// activations rounded to e4m3 on the CUDA side only).
double kTolerance = 3e-2;
std::string g_quantization;  // --quantization: both runners load with it
std::string g_kv_cache_dtype = "auto";  // --kv-cache-dtype: likewise

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
  std::printf("%-4s %-34s rows %3d  worst rel %.2e (tol %.2g)  argmax differs %d (+%d near-ties)\n",
              ok ? "ok" : "FAIL", step, rows, worst, kTolerance, argmax_diff, argmax_excused);
}

// Execute's picks against PickArgmax on the logits rows of the same step.
void ComparePicks(const char* step, const std::vector<ArgmaxSample>& got,
                  const std::vector<float>& logits, const std::vector<int>& rows,
                  const std::vector<int>& num_logprobs, int vocab) {
  int bad = 0;
  double worst_lp = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const ArgmaxSample want =
        PickArgmax(std::span<const float>(logits.data() + static_cast<size_t>(rows[i]) * vocab,
                                          vocab), num_logprobs[i]);
    const ArgmaxSample& g = got[i];
    bool ok = g.token_id == want.token_id && g.top.size() == want.top.size();
    if (num_logprobs[i] >= 0) worst_lp = std::max(worst_lp, static_cast<double>(std::fabs(g.logprob - want.logprob)));
    for (size_t j = 0; ok && j < want.top.size(); ++j) {
      ok = g.top[j].first == want.top[j].first;
      worst_lp = std::max(worst_lp, static_cast<double>(std::fabs(g.top[j].second - want.top[j].second)));
    }
    bad += !ok;
  }
  const bool ok = bad == 0 && worst_lp <= 1e-3;
  if (!ok) ++failures;
  std::printf("%-4s %-34s picks %2zu  differ %d  worst logprob diff %.1e (tol 1e-3)\n",
              ok ? "ok" : "FAIL", step, rows.size(), bad, worst_lp);
}

// Sampled picks of one step: got (Execute with specs) against PickToken on the GPU runner's own
// logits (must agree) and on the CPU runner's (printed).
long sampled_picks = 0, sampled_boundary = 0;
void CompareSampledPicks(const char* step, const std::vector<ArgmaxSample>& got,
                         const std::vector<float>& gpu_logits, const std::vector<float>& cpu_logits,
                         const std::vector<int>& rows, const std::vector<PickSpec>& specs,
                         const std::vector<int>& num_logprobs, int vocab) {
  int bad = 0, boundary = 0, same_as_cpu = 0;
  double worst_lp = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::span<const float> g_row(gpu_logits.data() + static_cast<size_t>(rows[i]) * vocab, vocab);
    const std::span<const float> c_row(cpu_logits.data() + static_cast<size_t>(rows[i]) * vocab, vocab);
    const ArgmaxSample want = PickToken(g_row, num_logprobs[i], &specs[i]);
    same_as_cpu += PickToken(c_row, -1, &specs[i]).token_id == got[i].token_id;
    ++sampled_picks;
    if (got[i].token_id != want.token_id) {
      // A rounding boundary: a nudge of u by 1e-9 gives the GPU's token on the host.
      PickSpec lo = specs[i], hi = specs[i];
      lo.u = std::max(0.0, lo.u - 1e-9);
      hi.u = std::min(std::nextafter(1.0, 0.0), hi.u + 1e-9);
      if (PickToken(g_row, -1, &lo).token_id == got[i].token_id ||
          PickToken(g_row, -1, &hi).token_id == got[i].token_id) {
        ++boundary;
        ++sampled_boundary;
      } else {
        ++bad;
      }
      continue;
    }
    if (num_logprobs[i] >= 0) {
      worst_lp = std::max(worst_lp, static_cast<double>(std::fabs(got[i].logprob - want.logprob)));
    }
  }
  const bool ok = bad == 0 && worst_lp <= 1e-3 && sampled_boundary * 100 <= std::max(100L, sampled_picks);
  if (!ok) ++failures;
  int masked = 0;
  for (const PickSpec& s : specs) masked += s.has_mask();
  std::printf("%-4s %-34s sampled %2zu (%d masked)  differ %d  boundary %d  = cpu runner's pick "
              "%d/%zu  logprob diff %.1e\n", ok ? "ok" : "FAIL", step, rows.size(), masked, bad,
              boundary, same_as_cpu, rows.size(), worst_lp);
}

// The PickSpec of row i of a step (cycling through temperature / top-k / top-p / min-p / penalty
// mixes) with a u from rng.
PickSpec SampledSpec(int i, std::mt19937_64& rng, std::span<const cpu::PenaltyEntry> penalties) {
  PickSpec p;
  p.u = static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
  switch (i % 5) {
    case 0: p.sample = {0.7f, 0.9f, 0, 0.0f}; break;
    case 1: p.sample = {1.0f, 1.0f, 20, 0.0f}; p.repetition_penalty = 1.3f; break;
    case 2: p.sample = {1.3f, 0.95f, 0, 0.05f}; p.frequency_penalty = 0.4f; p.presence_penalty = 0.2f; break;
    case 3: p.sample = {0.0f, 1.0f, 0, 0.0f}; p.repetition_penalty = 1.5f; break;  // greedy, penalized
    default: p.sample = {1.0f, 1.0f, 0, 0.0f}; break;                              // plain draw
  }
  if (p.has_penalties()) p.penalties = penalties;
  return p;
}

// Graph-on logits against another GPU runner's for the same step: max |diff| (0 = bit-exact) and
// ||a - b|| / ||b||; `tol` bounds the relative error (0: bit-exact required).
void CompareRunners(const char* what, const std::vector<float>& a, const std::vector<float>& b,
                    double tol) {
  double worst = a.size() == b.size() ? 0.0 : INFINITY, d2 = 0, b2 = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    worst = std::max(worst, std::isfinite(d) ? std::fabs(d) : INFINITY);
    d2 += d * d;
    b2 += static_cast<double>(b[i]) * b[i];
  }
  const double rel = b2 > 0 ? std::sqrt(d2 / b2) : std::sqrt(d2);
  const bool ok = tol == 0 ? worst == 0 : (std::isfinite(worst) && rel <= tol);
  if (!ok) ++failures;
  std::printf("%-4s   %-32s max |diff| %.2e  rel %.2e (tol %s)\n", ok ? "ok" : "FAIL", what,
              worst, rel, tol == 0 ? "bit-exact" : "1e-2");
}

int Run(const std::string& model_dir, int steps) {
  auto cpu_or = LoadCpuModelRunner(model_dir, g_quantization, g_kv_cache_dtype);
  if (!cpu_or.ok()) {
    std::fprintf(stderr, "cpu runner: %s\n", cpu_or.status().ToString().c_str());
    return 2;
  }
  // Three CUDA runners: decode graphs (the default), padded eager, plain eager.
  std::unique_ptr<ModelRunner> gpus[3];
  const char* modes[3] = {nullptr, "pad", "0"};
  for (int i = 0; i < 3; ++i) {
    if (modes[i] != nullptr) setenv("TANDEM_CUDA_GRAPHS", modes[i], 1);
    else unsetenv("TANDEM_CUDA_GRAPHS");
    CudaRunnerOptions ro;
    ro.quantization = g_quantization;
    ro.kv_cache_dtype = g_kv_cache_dtype;
    auto gpu_or = LoadCudaModelRunner(model_dir, 0, ro);
    if (!gpu_or.ok()) {
      std::fprintf(stderr, "cuda runner: %s\n", gpu_or.status().ToString().c_str());
      return 2;
    }
    gpus[i] = std::move(*gpu_or);
  }
  unsetenv("TANDEM_CUDA_GRAPHS");
  ModelRunner& cpu = **cpu_or;
  ModelRunner& gpu = *gpus[0];
  const ModelConfig& c = cpu.config();
  const int num_blocks = 64;
  for (ModelRunner* r : {&cpu, gpus[0].get(), gpus[1].get(), gpus[2].get()}) {
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
  double gpu_ms[3] = {0, 0, 0};
  int sampled_picks_seen = 0;
  auto forward = [&](const ForwardBatch& batch, const char* step) {
    std::vector<float> lc, lg[3];
    Status a = cpu.Forward(batch, &lc);
    for (int i = 0; i < 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      Status b = gpus[i]->Forward(batch, &lg[i]);
      gpu_ms[i] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!a.ok() || !b.ok()) {
        std::fprintf(stderr, "%s: cpu %s, gpu %s\n", step, a.ToString().c_str(), b.ToString().c_str());
        std::exit(2);
      }
    }
    CompareStep(step, lc, lg[0], c.vocab_size);
    CompareRunners("graphs vs padded eager", lg[0], lg[1], 0.0);
    CompareRunners("graphs vs plain eager", lg[0], lg[2], 1e-2);
    // The same step through Execute: kArgmax slices picked on the GPU.
    ForwardBatch picked = batch;
    std::vector<int> rows, k;
    int row = 0;
    for (size_t s = 0; s < picked.seqs.size(); ++s) {
      SequenceSlice& sl = picked.seqs[s];
      const int n = sl.logits == SequenceSlice::Logits::kAll ? static_cast<int>(sl.token_ids.size()) : 1;
      if (sl.logits == SequenceSlice::Logits::kLast) {
        sl.logits = SequenceSlice::Logits::kArgmax;
        sl.num_logprobs = s % 3 == 0 ? 5 : s % 3 == 1 ? -1 : 0;
        rows.push_back(row);
        k.push_back(sl.num_logprobs);
      }
      row += n;
    }
    ForwardOutput out;
    Status e = gpu.Execute(picked, &out);
    if (!e.ok()) {
      std::fprintf(stderr, "%s: Execute %s\n", step, e.ToString().c_str());
      std::exit(2);
    }
    ComparePicks(step, out.samples, lg[0], rows, k, c.vocab_size);
    // Again with sampling specs (PickSpec), as the engine sends every row to a GPU runner.
    static std::mt19937_64 u_rng(20261201);
    std::vector<PickSpec> specs(picked.seqs.size());
    std::vector<std::vector<cpu::PenaltyEntry>> entries(picked.seqs.size());
    std::vector<PickSpec> row_specs;
    for (size_t s = 0; s < picked.seqs.size(); ++s) {
      SequenceSlice& sl = picked.seqs[s];
      if (sl.logits != SequenceSlice::Logits::kPick) continue;
      const std::vector<int32_t> output = {7, 7, 11, 13, 7};
      entries[s] = cpu::MakePenaltyEntries(sl.token_ids, output, c.vocab_size);
      specs[s] = SampledSpec(static_cast<int>(s) + sampled_picks_seen, u_rng, entries[s]);
      // A structured output's token bitmask on every row that wants no log-probabilities (the
      // engine sends masked rows only so): ids t % 5 == 0 or t % 7 == 3, the last word left
      // out (those ids disallowed).
      static const std::vector<uint32_t> mask = [&] {
        std::vector<uint32_t> m((c.vocab_size + 31) / 32 - 1, 0);
        for (size_t t = 0; t < m.size() * 32; ++t) {
          if (t % 5 == 0 || t % 7 == 3) m[t / 32] |= 1u << (t % 32);
        }
        return m;
      }();
      if (sl.num_logprobs < 0) specs[s].allowed = mask;
      sl.pick = &specs[s];
      row_specs.push_back(specs[s]);
    }
    sampled_picks_seen += static_cast<int>(row_specs.size());
    ForwardOutput sampled;
    e = gpu.Execute(picked, &sampled);
    if (!e.ok()) {
      std::fprintf(stderr, "%s: Execute (sampled) %s\n", step, e.ToString().c_str());
      std::exit(2);
    }
    CompareSampledPicks(step, sampled.samples, lg[0], lc, rows, row_specs, k, c.vocab_size);
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
    const int active = 1 + step % 3;  // batches of 1, 2, 3: decode-graph buckets 1, 2, 4
    for (int s = 0; s < active; ++s) {
      seqs[s].tokens.push_back(next[s]);
      grow(seqs[s], seqs[s].tokens.size());
    }
    for (int s = 0; s < active; ++s) {
      const int pos = static_cast<int>(seqs[s].tokens.size()) - 1;
      decode.seqs.push_back({std::span<const int32_t>(seqs[s].tokens).subspan(pos), pos,
                             seqs[s].table, SequenceSlice::Logits::kLast});
    }
    char name[64];
    std::snprintf(name, sizeof(name), "decode step %d (%d seqs)", step + 1, active);
    last = forward(decode, name);
    for (int s = 0; s < active; ++s) next[s] = Argmax(last.data() + static_cast<size_t>(s) * c.vocab_size, c.vocab_size);
  }
  // A step mixing chunked prefill with decode rows (as the scheduler sends them: running requests
  // first): two decode rows (PagedDecode), a new 37-token prompt, then one more decode row (both
  // through PagedPrefill).
  {
    seqs.emplace_back();
    seqs[3].tokens = random_tokens(37);
    grow(seqs[3], 37);
    for (int s = 0; s < 3; ++s) {
      seqs[s].tokens.push_back(next[s]);
      grow(seqs[s], seqs[s].tokens.size());
    }
    auto decode_row = [&](int s) {
      const int pos = static_cast<int>(seqs[s].tokens.size()) - 1;
      return SequenceSlice{std::span<const int32_t>(seqs[s].tokens).subspan(pos), pos, seqs[s].table,
                           SequenceSlice::Logits::kLast};
    };
    ForwardBatch mixed;
    mixed.seqs.push_back(decode_row(0));
    mixed.seqs.push_back(decode_row(1));
    mixed.seqs.push_back({seqs[3].tokens, 0, seqs[3].table, SequenceSlice::Logits::kLast});
    mixed.seqs.push_back(decode_row(2));
    forward(mixed, "mixed: decode 2 + prefill 37 + decode 1");
  }
  std::printf("host ms over all steps (Forward, tiny model: launch-bound): graphs %.1f, padded "
              "eager %.1f, plain eager %.1f\n", gpu_ms[0], gpu_ms[1], gpu_ms[2]);
  std::printf("%s\n", failures == 0 ? "cuda_runner_check: all steps within tolerance"
                                    : "cuda_runner_check: FAILED");
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  std::string model_dir = TANDEM_DEFAULT_MODEL_DIR;
  int steps = 9;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--quantization") == 0 && i + 1 < argc) {
      tandem::g_quantization = argv[++i];
    } else if (std::strcmp(argv[i], "--kv-cache-dtype") == 0 && i + 1 < argc) {
      tandem::g_kv_cache_dtype = argv[++i];
    } else if (std::strcmp(argv[i], "--tol") == 0 && i + 1 < argc) {
      tandem::kTolerance = std::atof(argv[++i]);
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
