#include "cli/engine_options.h"

#include <algorithm>
#include <charconv>
#include <filesystem>

#include <fmt/format.h>

#include "common/file_util.h"

namespace tandem::cli {

Result<int> ParseDevice(const std::string& device) {
  if (device == "cpu") return -1;
  int id = -1;
  if (device == "cuda") {
    id = 0;
  } else if (device.rfind("cuda:", 0) == 0 && device.size() > 5) {
    const char* begin = device.data() + 5;
    const char* end = device.data() + device.size();
    auto [p, ec] = std::from_chars(begin, end, id);
    if (ec != std::errc() || p != end || id < 0) id = -1;
  }
  if (id < 0) {
    return Err(StatusCode::kInvalidArgument, "--device {}: expected cpu, cuda or cuda:N", device);
  }
#ifndef TANDEM_HAVE_CUDA
  return Err(StatusCode::kFailedPrecondition,
             "--device {}: this tandem was built without CUDA (configure with -DTANDEM_CUDA=ON "
             "where nvcc is installed); use --device cpu",
             device);
#else
  return id;
#endif
}

EngineConfig EngineOptions::ToEngineConfig() const {
  EngineConfig config;
  config.block_size = block_size;
  config.num_kv_blocks = num_kv_blocks;
  // 0 leaves the engine to size the pool from the device's free memory; the CPU keeps 1 GiB.
  const double gib = kv_cache_gib > 0 ? kv_cache_gib : (device == "cpu" ? 1.0 : 0.0);
  config.kv_cache_bytes = static_cast<size_t>(gib * (1ull << 30));
  config.gpu_memory_utilization = gpu_memory_utilization;
  config.max_num_seqs = max_num_seqs;
  config.max_num_batched_tokens = max_num_batched_tokens;
  config.max_model_len = max_model_len;
  config.kv_offload_host_bytes = static_cast<size_t>(kv_offload_host_gib * (1ull << 30));
  config.kv_offload_disk_dir = kv_offload_disk_dir;
  config.kv_offload_disk_bytes = static_cast<size_t>(kv_offload_disk_gib * (1ull << 30));
  config.kv_offload_disk_wait_ms = kv_offload_disk_wait_ms;
  config.quantization = quantization;
  config.kv_cache_dtype = kv_cache_dtype;
  config.cpu_threads = threads;
  config.async_scheduling = async_scheduling;
  // FP8 weights make other KV than the checkpoint's own: a disk tier must not mix them.
  if (config.kv_offload_disk_bytes > 0) {
    config.kv_offload_model_id = ModelIdentity(ModelDir()) + (quantization.empty() ? "" : " quantization:" + quantization) +
                                 (kv_cache_dtype == "auto" ? "" : " kv:" + kv_cache_dtype);
  }
  return config;
}

std::string ModelIdentity(const std::string& model_dir) {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::weakly_canonical(model_dir, ec);
  std::vector<std::string> parts;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool weights = name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0;
    if (!weights && name != "config.json") continue;
    std::error_code e2;
    const auto size = std::filesystem::file_size(e.path(), e2);
    const auto mtime = std::filesystem::last_write_time(e.path(), e2).time_since_epoch().count();
    parts.push_back(fmt::format("{}:{}:{}", name, static_cast<uint64_t>(size), static_cast<int64_t>(mtime)));
  }
  std::sort(parts.begin(), parts.end());
  std::string id = dir.string();
  for (const std::string& p : parts) id += " " + p;
  return id;
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

const std::vector<std::string>& EngineSizeFlagNames() {
  static const std::vector<std::string> names = {
      "max-num-seqs", "max-waiting-requests", "max-num-batched-tokens", "block-size",
      "num-kv-blocks", "kv-cache-gib", "gpu-memory-utilization", "max-model-len",
      "kv-offload-host-gib", "kv-offload-disk-dir", "kv-offload-disk-gib", "kv-offload-disk-wait-ms",
      "quantization", "kv-cache-dtype", "threads"};
  return names;
}

void AddEngineOptions(CLI::App& app, EngineOptions* opt) {
  app.add_option("--model", opt->model_dir,
                 "Hugging Face model directory (default: the bundled tiny Qwen3)");
  app.add_option("--served-model-name", opt->served_model_name,
                 "Model id in the API (default: the model directory's name)");
  app.add_option("--device", opt->device,
                 "cpu, cuda (= cuda:0) or cuda:N: where the engine computes and keeps its KV cache")
      ->check([](const std::string& d) {
        auto id = ParseDevice(d);
        return id.ok() ? std::string() : id.status().message();
      });
  app.add_option("--max-num-seqs", opt->max_num_seqs, "Running requests at most")
      ->check(CLI::Range(1, 1 << 30));
  app.add_flag("--async-scheduling", opt->async_scheduling,
               "Overlap the engine's CPU work (scheduling the next step, detokenization, stop "
               "strings) with the running forward pass; the same tokens as without");
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
  app.add_option("--kv-cache-gib", opt->kv_cache_gib,
                 "KV pool size in GiB when --num-kv-blocks is 0 (0, the default: 1 GiB on the "
                 "CPU; on a GPU what --gpu-memory-utilization leaves after the weights and the "
                 "largest step)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--gpu-memory-utilization", opt->gpu_memory_utilization,
                 "GPU: the fraction of the device's total memory this worker may use for "
                 "weights, activations and KV cache (vLLM's meaning)")
      ->check(CLI::Range(0.01, 1.0));
  app.add_option("--kv-offload-host-gib", opt->kv_offload_host_gib,
                 "Host memory in GiB for the prefix-cache blocks the KV pool evicts, copied back "
                 "when a later request shares the prefix (0, the default: off)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--kv-offload-disk-dir", opt->kv_offload_disk_dir,
                 "Directory for a disk tier below the host tier (with --kv-offload-disk-gib): "
                 "blocks the host tier holds are also written here, and a request whose prefix "
                 "only the disk holds waits for them to be read back; a slab file per worker, kept "
                 "across restarts of the same model");
  app.add_option("--kv-offload-disk-gib", opt->kv_offload_disk_gib,
                 "Size of the disk tier in GiB (0, the default: off; needs --kv-offload-host-gib)")
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--kv-offload-disk-wait-ms", opt->kv_offload_disk_wait_ms,
                 "How long a request waits for its prefix's blocks from the disk tier before "
                 "computing what has not arrived")
      ->check(CLI::Range(0, 600000));
  app.add_option("--quantization", opt->quantization,
                 "Weight quantization: fp8 quantizes an unquantized checkpoint's linear weights to "
                 "FP8 E4M3 per output channel at load (vLLM's --quantization fp8); FP8 "
                 "checkpoints (quantization_config fp8 or compressed-tensors) are recognized "
                 "without it. The CPU engine dequantizes FP8 weights to fp32 at load; the CUDA engine "
                 "(sm_90) keeps the layers' projections in FP8")
      ->check(CLI::IsMember({"", "none", "fp8"}));
  app.add_option("--threads", opt->threads,
                 "CPU engine threads (0, the default: the cores this process may use, its affinity "
                 "mask capped by its cgroup CPU quota, e.g. Docker's --cpus or a Kubernetes CPU limit)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--kv-cache-dtype", opt->kv_cache_dtype,
                 "KV cache element type: auto (fp32 on the CPU, bf16 on CUDA) or fp8 / fp8_e4m3 "
                 "(vLLM's names: FP8 E4M3 with scale 1.0, a quarter of the CPU pool's bytes; prefill "
                 "and decode workers must agree)")
      ->check(CLI::IsMember({"auto", "fp8", "fp8_e4m3"}));
  app.add_option("--max-model-len", opt->max_model_len,
                 "Context length (0: the model's max_position_embeddings)")
      ->check(CLI::Range(0, 1 << 30));
}

}  // namespace tandem::cli
