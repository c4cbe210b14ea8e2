// tandem generate: runs one prompt through the engine (CPU, or the CUDA runner with --device
// cuda:N) and prints text (streamed) or one JSON object:
// {prompt_token_ids, token_ids, text, finish_reason, top_logprobs, usage}.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/prompt.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/model_bundle.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "engine/engine.h"

namespace tandem::cli {
namespace {

struct GenerateOptions {
  std::string model_dir;
  std::string prompt;
  std::string system;
  bool chat = false;
  bool thinking = false;
  int max_tokens = 32;
  float temperature = 0.0f;  // the bundled model's generation_config.json is greedy
  float top_p = 1.0f;
  int top_k = 0;
  int64_t seed = -1;
  int top_logprobs = -1;
  bool ignore_eos = false;
  std::string output = "text";
  int block_size = 16;
  int max_num_batched_tokens = 2048;
  int num_kv_blocks = 0;
  int max_model_len = 0;
  std::string device = "cpu";
  double gpu_memory_utilization = 0.9;
  std::string quantization;
  std::string kv_cache_dtype = "auto";
  int threads = 0;
};

int Fail(const Status& status) {
  std::fprintf(stderr, "tandem generate: %s\n", status.ToString().c_str());
  return 1;
}

int RunGenerate(const GenerateOptions& opt) {
  const std::string model_dir = opt.model_dir.empty() ? DefaultModelDir() : opt.model_dir;
  EngineConfig config;
  config.block_size = opt.block_size;
  config.max_num_batched_tokens = opt.max_num_batched_tokens;
  config.num_kv_blocks = opt.num_kv_blocks;
  // One request: a CPU pool then holds one max_model_len sequence (kv_cache_sizing.h), not a server's.
  config.max_num_seqs = 1;
  config.max_model_len = opt.max_model_len;
  config.gpu_memory_utilization = opt.gpu_memory_utilization;
  config.quantization = opt.quantization;
  config.kv_cache_dtype = opt.kv_cache_dtype;
  config.cpu_threads = opt.threads;
  const Result<int> device_id = ParseDevice(opt.device);
  if (!device_id.ok()) return Fail(device_id.status());
  // Without --chat nothing is rendered: the template is not read (nor its parser's code paged in).
  const ChatTemplateUse chat_template = opt.chat ? ChatTemplateUse::kRequired : ChatTemplateUse::kSkip;
  auto bundle = LoadModelBundle(model_dir, config, chat_template, *device_id);
  if (!bundle.ok()) return Fail(bundle.status());
  const Tokenizer& tokenizer = *bundle->tokenizer;
  Engine& engine = *bundle->engine;

  std::vector<int32_t> prompt_ids;
  if (opt.chat) {
    ChatOptions chat_options;
    chat_options.extra_kwargs = {{"enable_thinking", opt.thinking}};
    nlohmann::json messages = nlohmann::json::array();
    if (!opt.system.empty()) messages.push_back({{"role", "system"}, {"content", opt.system}});
    messages.push_back({{"role", "user"}, {"content", opt.prompt}});
    auto rendered = bundle->renderer->Render(messages, chat_options);
    if (!rendered.ok()) return Fail(rendered.status());
    prompt_ids = EncodeChatPrompt(tokenizer, *rendered);
  } else {
    prompt_ids = tokenizer.Encode(opt.prompt, /*parse_special=*/false);
  }

  SamplingParams params;
  params.max_tokens = opt.max_tokens;
  params.temperature = opt.temperature;
  params.top_p = opt.top_p;
  params.top_k = opt.top_k;
  params.ignore_eos = opt.ignore_eos;
  if (opt.seed >= 0) params.seed = static_cast<uint64_t>(opt.seed);
  params.logprobs = opt.top_logprobs;
  Status added = engine.AddRequest("generate-0", prompt_ids, params);
  if (!added.ok()) return Fail(added);

  const bool json_out = opt.output == "json";
  std::vector<int32_t> token_ids;
  std::string text;
  nlohmann::json top_logprobs = nlohmann::json::array();
  FinishReason finish = FinishReason::kNone;
  std::string error;
  int num_cached = 0;
  while (engine.HasUnfinishedRequests()) {
    for (const RequestOutput& out : engine.Step()) {
      token_ids.insert(token_ids.end(), out.new_token_ids.begin(), out.new_token_ids.end());
      text += out.new_text;
      for (const TokenLogprob& lp : out.new_logprobs) {
        nlohmann::json position = nlohmann::json::array();
        for (const auto& [id, logprob] : lp.top) position.push_back({id, logprob});
        top_logprobs.push_back(std::move(position));
      }
      if (!json_out && !out.new_text.empty()) {
        std::fwrite(out.new_text.data(), 1, out.new_text.size(), stdout);
        std::fflush(stdout);
      }
      num_cached = out.num_cached_tokens;
      if (out.finished) {
        finish = out.finish_reason;
        error = out.error;
      }
    }
  }
  if (finish == FinishReason::kError) {
    return Fail(Status(StatusCode::kInternal, error));
  }
  if (json_out) {
    nlohmann::json result = {
        {"prompt_token_ids", prompt_ids},
        {"token_ids", token_ids},
        {"text", text},
        {"finish_reason", FinishReasonName(finish)},
        {"usage",
         {{"prompt_tokens", prompt_ids.size()},
          {"completion_tokens", token_ids.size()},
          {"cached_tokens", num_cached}}},
    };
    if (opt.top_logprobs >= 0) result["top_logprobs"] = std::move(top_logprobs);
    std::cout << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::printf("\n");
  }
  return 0;
}

}  // namespace

Runner RegisterGenerate(CLI::App& app) {
  auto opt = std::make_shared<GenerateOptions>();
  app.add_option("--model", opt->model_dir,
                 "Hugging Face model directory (default: the bundled tiny Qwen3)");
  app.add_option("--prompt", opt->prompt, "Prompt text")->required();
  app.add_option("--system", opt->system, "With --chat: a system message before the prompt");
  app.add_flag("--chat", opt->chat, "Render the prompt as one user message with the chat template");
  app.add_flag("--thinking", opt->thinking, "With --chat: enable_thinking=true");
  app.add_option("--max-tokens", opt->max_tokens, "Generated tokens at most")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--temperature", opt->temperature, "0 = greedy (default)")
      ->check(CLI::Range(0.0, 2.0));
  app.add_option("--top-p", opt->top_p, "Nucleus sampling")->check(CLI::Range(0.0, 1.0));
  app.add_option("--top-k", opt->top_k, "Top-k sampling (0 = off)");
  app.add_option("--seed", opt->seed, "Sampling seed");
  app.add_option("--top-logprobs", opt->top_logprobs,
                 "Log-probabilities of the top K tokens at each generated position")
      ->check(CLI::Range(0, 20));
  app.add_flag("--ignore-eos", opt->ignore_eos, "Keep generating past end-of-sequence tokens");
  app.add_option("--output", opt->output, "text or json")
      ->check(CLI::IsMember({"text", "json"}));
  app.add_option("--block-size", opt->block_size, "KV block size in tokens")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--max-num-batched-tokens", opt->max_num_batched_tokens,
                 "Token budget of one engine step (chunked prefill)")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--num-kv-blocks", opt->num_kv_blocks, "KV pool size in blocks (0 = default)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--max-model-len", opt->max_model_len,
                 "Context length (0 = the model's max_position_embeddings)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--device", opt->device, "cpu, cuda (= cuda:0) or cuda:N");
  app.add_option("--gpu-memory-utilization", opt->gpu_memory_utilization,
                 "GPU: the fraction of the device's memory for weights, activations and KV cache")
      ->check(CLI::Range(0.01, 1.0));
  app.add_option("--quantization", opt->quantization,
                 "fp8: FP8 E4M3 linear weights, per output channel, for an unquantized checkpoint "
                 "(FP8 checkpoints are recognized without it)")
      ->check(CLI::IsMember({"", "none", "fp8"}));
  app.add_option("--kv-cache-dtype", opt->kv_cache_dtype, "auto, or fp8 / fp8_e4m3: an FP8 E4M3 KV cache")
      ->check(CLI::IsMember({"auto", "fp8", "fp8_e4m3"}));
  app.add_option("--threads", opt->threads,
                 "CPU engine threads (0: the cores this process may use: affinity, cgroup CPU quota)")
      ->check(CLI::Range(0, 4096));
  return [opt] { return RunGenerate(*opt); };
}

}  // namespace tandem::cli
