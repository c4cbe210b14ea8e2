// cuda_peer_dump: runs prompts through the CUDA ModelRunner (or the CPU one, --cpu) and writes the
// logits and greedy tokens for scripts/gpu/peer_check.py to compare with Hugging Face transformers.
//
// Input (--ids FILE): one prompt a line, token ids separated by spaces. For prompt i (0-based)
// it writes into --out DIR:
//   p<i>.prompt.f32   [T, vocab] fp32 row-major: the logits of every prompt position (one prefill
//                     step with Logits::kAll; with --chunk C the prompt goes in steps of C tokens),
//                     only with --prompt-logits (else nothing);
//   p<i>.steps.f32    [N, vocab]: row 0 = the last prompt position, row k = the logits of decode
//                     step k (the input being greedy token k-1), so token k = argmax(row k);
//   p<i>.tokens.txt   the N greedy tokens (argmax, lowest id on ties), space separated.
// and meta.json: vocab, prompts (lengths), steps, seconds per phase.
// Sequences run one after another over one block table (KV blocks reused).
// Usage: cuda_peer_dump MODEL_DIR --ids FILE --out DIR [--steps N] [--prompt-logits] [--chunk C]
//                       [--cpu]
// Exit 0 on success, 2 on an error, 77 with no CUDA device.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "model/cuda_model_runner.h"
#include "model/model_runner.h"

namespace tandem {
namespace {

constexpr int kBlockSize = 16;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The sampler's greedy rule: the largest logit, the lowest id on ties.
int32_t Argmax(const float* v, int n) {
  return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

bool WriteRows(const std::string& path, const float* data, size_t count) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(data, sizeof(float), count, f) == count;
  return std::fclose(f) == 0 && ok;
}

struct Args {
  std::string model_dir, ids_file, out_dir;
  int steps = 32;
  int chunk = 0;  // 0: the whole prompt in one step
  bool prompt_logits = false;
  bool cpu = false;
};

int Run(const Args& a) {
  std::vector<std::vector<int32_t>> prompts;
  {
    std::ifstream in(a.ids_file);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", a.ids_file.c_str());
      return 2;
    }
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::vector<int32_t> ids;
      long long id;
      while (ls >> id) ids.push_back(static_cast<int32_t>(id));
      if (!ids.empty()) prompts.push_back(std::move(ids));
    }
  }
  if (prompts.empty() || a.steps < 1) {
    std::fprintf(stderr, "no prompts in %s (or --steps < 1)\n", a.ids_file.c_str());
    return 2;
  }
  const double t_load = Now();
  auto runner_or = a.cpu ? LoadCpuModelRunner(a.model_dir) : LoadCudaModelRunner(a.model_dir, 0);
  if (!runner_or.ok()) {
    std::fprintf(stderr, "load %s: %s\n", a.model_dir.c_str(), runner_or.status().ToString().c_str());
    return 2;
  }
  ModelRunner& runner = **runner_or;
  const double load_s = Now() - t_load;
  const ModelConfig& c = runner.config();
  const int vocab = c.vocab_size;
  size_t max_len = 0;
  for (const auto& p : prompts) max_len = std::max(max_len, p.size());
  const int num_blocks = static_cast<int>((max_len + a.steps + kBlockSize - 1) / kBlockSize) + 1;
  if (Status st = runner.AllocateKVCache(num_blocks, kBlockSize); !st.ok()) {
    std::fprintf(stderr, "AllocateKVCache(%d): %s\n", num_blocks, st.ToString().c_str());
    return 2;
  }
  std::printf("cuda_peer_dump: %s (%s) loaded in %.1f s: %d layers, hidden %d, heads %d/%d, vocab %d; "
              "%zu prompts, %d steps\n", a.model_dir.c_str(), a.cpu ? "cpu" : "cuda", load_s,
              c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
              vocab, prompts.size(), a.steps);
  // Blocks in reverse order, so that the table is not the identity.
  std::vector<int32_t> table(num_blocks);
  for (int i = 0; i < num_blocks; ++i) table[i] = num_blocks - 1 - i;

  std::ostringstream meta;
  meta << "{\"vocab\": " << vocab << ", \"steps\": " << a.steps << ", \"load_s\": " << load_s
       << ", \"prompts\": [";
  for (size_t p = 0; p < prompts.size(); ++p) {
    std::vector<int32_t> seq = prompts[p];
    const int T = static_cast<int>(seq.size());
    std::vector<float> prompt_rows, steps_rows, logits;
    if (a.prompt_logits) prompt_rows.reserve(static_cast<size_t>(T) * vocab);
    steps_rows.reserve(static_cast<size_t>(a.steps) * vocab);
    // Prefill, in chunks when asked.
    const double t0 = Now();
    const int chunk = a.chunk > 0 ? a.chunk : T;
    for (int start = 0; start < T; start += chunk) {
      const int n = std::min(chunk, T - start);
      ForwardBatch batch;
      batch.seqs.push_back({std::span<const int32_t>(seq).subspan(start, n), start, table,
                            a.prompt_logits ? SequenceSlice::Logits::kAll
                                            : SequenceSlice::Logits::kLast});
      if (Status st = runner.Forward(batch, &logits); !st.ok()) {
        std::fprintf(stderr, "prompt %zu prefill at %d: %s\n", p, start, st.ToString().c_str());
        return 2;
      }
      if (a.prompt_logits) prompt_rows.insert(prompt_rows.end(), logits.begin(), logits.end());
      if (start + n == T) {  // the last row starts the greedy steps
        steps_rows.insert(steps_rows.end(), logits.end() - vocab, logits.end());
      }
    }
    const double prefill_s = Now() - t0;
    std::vector<int32_t> tokens;
    tokens.push_back(Argmax(steps_rows.data(), vocab));
    const double t1 = Now();
    for (int k = 1; k < a.steps; ++k) {
      seq.push_back(tokens.back());
      const int pos = static_cast<int>(seq.size()) - 1;
      ForwardBatch batch;
      batch.seqs.push_back({std::span<const int32_t>(seq).subspan(pos, 1), pos, table,
                            SequenceSlice::Logits::kLast});
      if (Status st = runner.Forward(batch, &logits); !st.ok()) {
        std::fprintf(stderr, "prompt %zu decode step %d: %s\n", p, k, st.ToString().c_str());
        return 2;
      }
      steps_rows.insert(steps_rows.end(), logits.begin(), logits.begin() + vocab);
      tokens.push_back(Argmax(logits.data(), vocab));
    }
    const double decode_s = Now() - t1;
    const std::string base = a.out_dir + "/p" + std::to_string(p);
    bool ok = WriteRows(base + ".steps.f32", steps_rows.data(), steps_rows.size());
    if (a.prompt_logits) ok = ok && WriteRows(base + ".prompt.f32", prompt_rows.data(), prompt_rows.size());
    {
      std::ofstream t(base + ".tokens.txt");
      for (size_t i = 0; i < tokens.size(); ++i) t << (i ? " " : "") << tokens[i];
      t << "\n";
      ok = ok && static_cast<bool>(t);
    }
    if (!ok) {
      std::fprintf(stderr, "cannot write %s.*\n", base.c_str());
      return 2;
    }
    std::printf("prompt %zu: %d tokens, prefill %.1f ms, %d decode steps %.1f ms (%.2f ms/step)\n", p,
                T, prefill_s * 1e3, a.steps - 1, decode_s * 1e3,
                a.steps > 1 ? decode_s * 1e3 / (a.steps - 1) : 0.0);
    meta << (p ? ", " : "") << "{\"len\": " << T << ", \"prefill_s\": " << prefill_s
         << ", \"decode_s\": " << decode_s << "}";
  }
  meta << "]}\n";
  std::ofstream m(a.out_dir + "/meta.json");
  m << meta.str();
  return m ? 0 : 2;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  tandem::Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--ids") a.ids_file = value();
    else if (arg == "--out") a.out_dir = value();
    else if (arg == "--steps") a.steps = std::atoi(value().c_str());
    else if (arg == "--chunk") a.chunk = std::atoi(value().c_str());
    else if (arg == "--prompt-logits") a.prompt_logits = true;
    else if (arg == "--cpu") a.cpu = true;
    else if (!arg.empty() && arg[0] != '-' && a.model_dir.empty()) a.model_dir = arg;
    else {
      std::fprintf(stderr, "usage: %s MODEL_DIR --ids FILE --out DIR [--steps N] [--prompt-logits] "
                   "[--chunk C] [--cpu]\n", argv[0]);
      return 2;
    }
  }
  if (a.model_dir.empty() || a.ids_file.empty() || a.out_dir.empty()) {
    std::fprintf(stderr, "usage: %s MODEL_DIR --ids FILE --out DIR [--steps N] [--prompt-logits] "
                 "[--chunk C] [--cpu]\n", argv[0]);
    return 2;
  }
  int count = 0;
  if (!a.cpu && (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)) {
    std::printf("cuda_peer_dump: no CUDA device\n");
    return 77;
  }
  return tandem::Run(a);
}
