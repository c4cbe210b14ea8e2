#include "cli/engine_options.h"

#include <filesystem>

#include "common/file_util.h"

namespace tandem::cli {

EngineConfig EngineOptions::ToEngineConfig() const {
  EngineConfig config;
  config.block_size = block_size;
  config.num_kv_blocks = num_kv_blocks;
  config.kv_cache_bytes = static_cast<size_t>(kv_cache_gib * (1ull << 30));
  config.max_num_seqs = max_num_seqs;
  config.max_num_batched_tokens = max_num_batched_tokens;
  config.max_model_len = max_model_len;
  return config;
}

std::string EngineOptions::ModelDir() const {
  return model_dir.empty() ? DefaultModelDir() : model_dir;
}

std::string EngineOptions::ServedModelName() const {
  if (!served_model_name.empty()) return served_model_name;
  const std::filesystem::path dir = std::filesystem::path(ModelDir()).lexically_normal();
  std::string name = dir.filename().string();
  if (name.empty()) name = dir.parent_path().filename().string();
  return name;
}

void AddEngineOptions(CLI::App& app, EngineOptions* opt) {
  app.add_option("--model", opt->model_dir,
                 "Hugging Face model directory (default: the bundled tiny Qwen3)");
  app.add_option("--served-model-name", opt->served_model_name,
                 "Model id in the API (default: the model directory's name)");
  app.add_option("--max-num-seqs", opt->max_num_seqs, "Running requests at most")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--max-waiting-requests", opt->max_waiting_requests,
                 "Waiting requests at most; beyond it requests get 503")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--max-num-batched-tokens", opt->max_num_batched_tokens,
                 "Token budget of one engine step (chunked prefill)")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--block-size", opt->block_size, "KV block size in tokens")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--num-kv-blocks", opt->num_kv_blocks,
                 "KV pool size in blocks (0: from --kv-cache-gib)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--kv-cache-gib", opt->kv_cache_gib, "KV pool size in GiB when --num-kv-blocks is 0")
      ->check(CLI::Range(0.001, 1e6));
  app.add_option("--max-model-len", opt->max_model_len,
                 "Context length (0: the model's max_position_embeddings)")
      ->check(CLI::Range(0, 1 << 30));
}

}  // namespace tandem::cli
