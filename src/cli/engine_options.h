// Engine options shared by `tandem run` and `tandem worker`: the CLI flags, the EngineConfig they
// make, the device, and the served model name.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/status.h"
#include "engine/engine.h"

namespace tandem::cli {

// --device: "cpu" -> -1; "cuda" -> 0; "cuda:N" -> N. InvalidArgument for anything else;
// FailedPrecondition ("this tandem was built without CUDA") for cuda in a build without it.
Result<int> ParseDevice(const std::string& device);

struct EngineOptions {
  std::string model_dir;          // empty: the bundled tiny Qwen3
  std::string served_model_name;  // empty: the model directory's name
  std::string device = "cpu";     // cpu | cuda | cuda:N
  int max_num_seqs = 64;
  bool async_scheduling = false;  // --async-scheduling (EngineConfig::async_scheduling)
  int max_waiting_requests = 256;
  int max_num_batched_tokens = 2048;
  int block_size = 16;
  int num_kv_blocks = 0;
  double kv_cache_gib = 0;        // 0: 1 GiB on the CPU; on a GPU from gpu_memory_utilization
  double kv_offload_host_gib = 0;  // host tier for evicted prefix blocks (kvtier/offloader.h); 0 off
  std::string kv_offload_disk_dir;  // disk tier below it (kvtier/disk_tier.h)
  double kv_offload_disk_gib = 0;   // its size; 0 off
  int kv_offload_disk_wait_ms = 1000;
  double gpu_memory_utilization = 0.9;
  int max_model_len = 0;
  std::string quantization;       // "" (the checkpoint's own) | fp8 (model/quantization.h)
  std::string kv_cache_dtype = "auto";  // auto | fp8 | fp8_e4m3 (model/quantization.h)
  int threads = 0;                 // CPU engine threads; 0: the cores the process may use

  EngineConfig ToEngineConfig() const;
  std::string ModelDir() const;          // model_dir or the bundled model
  std::string ServedModelName() const;   // served_model_name or ModelDir()'s last component
};

// --model, --served-model-name, --device and the engine's sizes (--max-num-seqs,
// --max-waiting-requests, --max-num-batched-tokens, --block-size, --num-kv-blocks,
// --kv-cache-gib, --gpu-memory-utilization, --max-model-len, --quantization, the KV offload tiers).
void AddEngineOptions(CLI::App& app, EngineOptions* options);

// What a disk tier's blocks depend on besides shapes and dtype: the model directory's canonical
// path, and the names, sizes and modification times of its config.json and *.safetensors.
std::string ModelIdentity(const std::string& model_dir);

// The engine flag names (without --) that AddEngineOptions adds besides --model,
// --served-model-name and --device: what `tandem run` passes on to its workers.
const std::vector<std::string>& EngineSizeFlagNames();

}  // namespace tandem::cli
