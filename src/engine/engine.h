// Engine: continuous batching over a paged KV cache with prefix caching (vLLM v1 shape).
//
//   step() = schedule -> run model -> sample -> post-process (detokenize, stop checks)
//
// The scheduler thinks in tokens: each step moves every running request's num_computed_tokens
// toward its num_tokens under a token budget; prefill, chunked prefill and decode are one mechanism.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/sampling_params.h"
#include "model/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace tandem {

struct EngineConfig {
  int block_size = 16;                 // tokens per KV block
  int num_kv_blocks = 0;               // 0: from kv_cache_bytes
  size_t kv_cache_bytes = 256u << 20;  // KV pool size when num_kv_blocks == 0
  int max_num_seqs = 64;               // running requests at most
  int max_num_batched_tokens = 2048;   // token budget of one step (chunked prefill splits prompts)
  int max_model_len = 0;               // 0: the model's max_position_embeddings
  bool enable_prefix_caching = true;
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* FinishReasonName(FinishReason reason);  // "stop", "length", "abort", "error"

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // the top-k alternatives, best first
};

// What one step produced for one request.
struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> new_token_ids;
  std::vector<TokenLogprob> new_logprobs;  // parallel to new_token_ids when logprobs >= 0
  std::string new_text;                    // detokenized, stop strings held back / cut
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;            // when finish_reason == kError
  int num_prompt_tokens = 0;
  int num_cached_tokens = 0;    // prompt tokens served from the prefix cache
  int num_output_tokens = 0;    // total so far
};

struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;
  int num_kv_blocks_total = 0;
  int num_kv_blocks_used = 0;  // blocks referenced by live requests
  uint64_t prefix_cache_queries = 0;  // prompt tokens looked up
  uint64_t prefix_cache_hits = 0;     // of which served from the cache
};

class Engine {
 public:
  // tokenizer may be null (then no text, no stop strings).
  static Result<std::unique_ptr<Engine>> Create(std::unique_ptr<ModelRunner> runner,
                                                std::shared_ptr<const Tokenizer> tokenizer,
                                                const EngineConfig& config);
  virtual ~Engine() = default;

  // Queues a request. InvalidArgument: empty prompt, a token id outside the vocab, a prompt
  // longer than max_model_len (naming both lengths), max_tokens < 1, bad sampling values,
  // a duplicate request id. ResourceExhausted: the KV pool can never hold this request.
  virtual Status AddRequest(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                            const SamplingParams& params) = 0;
  // The checks AddRequest makes, without queuing (same errors). Reads only immutable
  // configuration: safe to call from any thread while another drives Step().
  virtual Status ValidateRequest(const std::vector<int32_t>& prompt_token_ids,
                                 const SamplingParams& params) const = 0;
  // Ends a request now (its blocks return to the pool); its next output says kAbort.
  virtual void AbortRequest(const std::string& request_id) = 0;
  // One scheduling step. Outputs only for requests that produced something or finished.
  virtual std::vector<RequestOutput> Step() = 0;
  virtual bool HasUnfinishedRequests() const = 0;
  virtual EngineStats Stats() const = 0;
  virtual const ModelConfig& model_config() const = 0;
  // The context length in effect (EngineConfig::max_model_len or the model's).
  virtual int max_model_len() const = 0;
};

}  // namespace tandem
