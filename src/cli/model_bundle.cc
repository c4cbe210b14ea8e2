#include "cli/model_bundle.h"

#include <malloc.h>

#include <filesystem>

#include "common/cpu_cores.h"
#include "common/logging.h"
#include "kernels/cpu/matmul.h"
#include "model/cuda_model_runner.h"

namespace tandem::cli {
namespace {

// Loading frees more than it keeps (tokenizer.json's JSON, its vocab and merge strings): 1.5 MB
// of free chunks stay between the allocations that live on (the bundled model), and glibc's free
// gives back only the heap's top. malloc_trim returns the whole pages of free chunks anywhere in
// the heap (issue 29, memory: tandem generate's heap 7.5 -> 6.8 MB).
void ReturnFreedHeapPages() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

}  // namespace

Result<ModelBundle> LoadTextBundle(const std::string& model_dir, ChatTemplateUse chat_template) {
  std::error_code ec;
  if (!std::filesystem::is_directory(model_dir, ec)) {
    return Err(StatusCode::kNotFound, "model directory not found: {}", model_dir);
  }
  ModelBundle bundle;
  bundle.model_dir = model_dir;
  TANDEM_ASSIGN_OR_RETURN(bundle.tokenizer, Tokenizer::Load(model_dir));
  if (chat_template != ChatTemplateUse::kSkip) {
    auto renderer = ChatRenderer::Load(model_dir);
    if (renderer.ok()) {
      bundle.renderer = std::make_shared<const ChatRenderer>(std::move(renderer).value());
    } else if (chat_template == ChatTemplateUse::kRequired) {
      return renderer.status();
    } else {
      log::warn("no chat template: {}", renderer.status().ToString());
    }
  }
  ReturnFreedHeapPages();
  return bundle;
}

namespace {

Result<std::unique_ptr<ModelRunner>> LoadRunner(const std::string& model_dir, int device_id,
                                                const EngineConfig& config) {
  if (device_id < 0) {
    const int threads = config.cpu_threads > 0 ? config.cpu_threads : UsableCores();
    cpu::SetLinearThreads(threads);
    log::info("CPU engine: {} threads ({}; usable cores {})", cpu::LinearThreads(),
              config.cpu_threads > 0 ? "--threads" : "the default", DescribeUsableCores());
    return LoadCpuModelRunner(model_dir, config.quantization, config.kv_cache_dtype);
  }
#ifdef TANDEM_HAVE_CUDA
  CudaRunnerOptions options;
  // The weights must leave room for the margin and an explicitly sized KV pool.
  options.gpu_memory_utilization = config.gpu_memory_utilization;
  options.reserve_bytes = kDeviceMemoryMarginBytes + config.kv_cache_bytes;
  options.quantization = config.quantization;
  options.kv_cache_dtype = config.kv_cache_dtype;
  return LoadCudaModelRunner(model_dir, device_id, options);
#else
  return Err(StatusCode::kFailedPrecondition,
             "--device cuda:{}: this tandem was built without CUDA; use --device cpu", device_id);
#endif
}

}  // namespace

Result<ModelBundle> LoadModelBundle(const std::string& model_dir, const EngineConfig& config,
                                    ChatTemplateUse chat_template, int device_id) {
  TANDEM_ASSIGN_OR_RETURN(ModelBundle bundle, LoadTextBundle(model_dir, chat_template));
  TANDEM_ASSIGN_OR_RETURN(auto runner, LoadRunner(model_dir, device_id, config));
  TANDEM_ASSIGN_OR_RETURN(bundle.engine, Engine::Create(std::move(runner), bundle.tokenizer, config));
  ReturnFreedHeapPages();
  return bundle;
}

}  // namespace tandem::cli
