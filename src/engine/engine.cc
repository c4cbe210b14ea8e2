// FinishReasonName and Engine::Create (the engine itself: engine_impl.h).
#include "engine/engine.h"

#include "common/logging.h"
#include "engine/engine_impl.h"
#include "engine/kv_cache_sizing.h"

namespace tandem {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

Result<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<ModelRunner> runner,
                                               std::shared_ptr<const Tokenizer> tokenizer,
                                               const EngineConfig& config_in) {
  if (!runner) return Status(StatusCode::kInvalidArgument, "no model runner");
  EngineConfig config = config_in;
  const ModelConfig& mc = runner->config();
  if (config.block_size < 1) {
    return Err(StatusCode::kInvalidArgument, "block_size must be >= 1 but is {}", config.block_size);
  }
  if (config.max_num_seqs < 1) {
    return Err(StatusCode::kInvalidArgument, "max_num_seqs must be >= 1 but is {}",
               config.max_num_seqs);
  }
  if (config.max_num_batched_tokens < 1) {
    return Err(StatusCode::kInvalidArgument, "max_num_batched_tokens must be >= 1 but is {}",
               config.max_num_batched_tokens);
  }
  if (mc.vocab_size < 1) {
    return Err(StatusCode::kInvalidArgument, "the model's vocab_size is {}", mc.vocab_size);
  }
  if (config.max_model_len < 0) {
    return Err(StatusCode::kInvalidArgument, "max_model_len must be >= 0 but is {}",
               config.max_model_len);
  }
  if (config.max_model_len == 0) config.max_model_len = mc.max_position_embeddings;
  if (config.max_model_len <= 0) {
    return Status(StatusCode::kInvalidArgument,
                  "max_model_len is not set and the model has no max_position_embeddings");
  }
  if (mc.max_position_embeddings > 0 && config.max_model_len > mc.max_position_embeddings) {
    return Err(StatusCode::kInvalidArgument,
               "max_model_len {} is larger than the model's max_position_embeddings {}",
               config.max_model_len, mc.max_position_embeddings);
  }
  if (config.num_kv_blocks < 0) {
    return Err(StatusCode::kInvalidArgument, "num_kv_blocks must be >= 0 but is {}",
               config.num_kv_blocks);
  }
  TANDEM_ASSIGN_OR_RETURN(const int num_blocks, ComputeNumKVBlocks(*runner, config));
  TANDEM_RETURN_IF_ERROR(runner->AllocateKVCache(num_blocks, config.block_size));
  log::debug("engine: {} KV blocks of {} tokens, max_model_len {}", num_blocks, config.block_size,
             config.max_model_len);
  return std::unique_ptr<Engine>(
      new engine_detail::EngineImpl(std::move(runner), std::move(tokenizer), config, num_blocks));
}

}  // namespace tandem
