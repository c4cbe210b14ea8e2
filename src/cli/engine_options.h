// Engine options shared by `tandem run` and `tandem worker`: the CLI flags, the EngineConfig they
// make, and the served model name.
#pragma once

#include <cstddef>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/engine.h"

namespace tandem::cli {

struct EngineOptions {
  std::string model_dir;          // empty: the bundled tiny Qwen3
  std::string served_model_name;  // empty: the model directory's name
  int max_num_seqs = 64;
  int max_waiting_requests = 256;
  int max_num_batched_tokens = 2048;
  int block_size = 16;
  int num_kv_blocks = 0;
  double kv_cache_gib = 1.0;
  int max_model_len = 0;

  EngineConfig ToEngineConfig() const;
  std::string ModelDir() const;          // model_dir or the bundled model
  std::string ServedModelName() const;   // served_model_name or ModelDir()'s last component
};

// --model, --served-model-name and the engine's sizes (--max-num-seqs, --max-waiting-requests,
// --max-num-batched-tokens, --block-size, --num-kv-blocks, --kv-cache-gib, --max-model-len).
void AddEngineOptions(CLI::App& app, EngineOptions* options);

}  // namespace tandem::cli
