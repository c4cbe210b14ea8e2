// Request: one generation request as the scheduler and the engine loop see it.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/sampling_params.h"

namespace tandem {

// kRemotePrefill: holds KV blocks for its whole prompt and waits for a prefill worker to write
// them (disaggregated decode); never scheduled for compute, never preempted.
enum class RequestStatus { kWaiting, kRunning, kPreempted, kRemotePrefill, kFinished };

// The overlapped engine loop (EngineConfig::async_scheduling) appends this id to a request's
// token_ids while the step that samples its next token runs, so that the next step can be
// scheduled from that predicted state; the sampled token replaces it before any step computes it.
inline constexpr int32_t kPendingTokenId = -1;

struct Request {
  std::string request_id;
  std::vector<int32_t> token_ids;  // the prompt, then the generated tokens (last: maybe kPendingTokenId)
  int num_prompt_tokens = 0;
  SamplingParams params;

  RequestStatus status = RequestStatus::kWaiting;
  // Tokens whose KV is in this request's blocks (or scheduled to be, once Schedule() returned).
  int num_computed_tokens = 0;
  int num_cached_tokens = -1;  // prompt tokens served by the prefix cache at first admission
  int num_preemptions = 0;
  // While its prefix's blocks are fetched from a slower KV tier: when the scheduler stops waiting
  // for them (steady clock, ns since its epoch); 0 when not waiting.
  int64_t fetch_deadline_ns = 0;
  std::vector<uint64_t> block_hashes;  // chained hashes of the full blocks of token_ids
  std::mt19937_64 generator;           // per-request sampling generator
  bool allow_remote_prefill = false;   // RequestOptions (engine.h)
  bool hold_blocks = false;
  std::string prefill_worker_id;       // RequestOptions::prefill_worker_id
  std::chrono::steady_clock::time_point arrival{};  // RequestOptions::arrival

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  std::span<const int32_t> prompt_token_ids() const {
    return std::span<const int32_t>(token_ids).first(num_prompt_tokens);
  }
  std::span<const int32_t> output_token_ids() const {
    return std::span<const int32_t>(token_ids).subspan(num_prompt_tokens);
  }
  // token_ids without a trailing kPendingTokenId: the tokens whose ids are known.
  std::span<const int32_t> known_token_ids() const {
    std::span<const int32_t> ids(token_ids);
    return !ids.empty() && ids.back() == kPendingTokenId ? ids.first(ids.size() - 1) : ids;
  }
};

}  // namespace tandem
