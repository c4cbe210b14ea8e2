// Helpers for engine tests: run an engine to completion and collect what each request produced.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"

namespace tandem::testing {

struct Collected {
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprob> logprobs;
  std::string text;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;
  int num_cached_tokens = 0;
  int num_outputs_after_finish = 0;
};

// Adds one step's outputs to `got`, checking output invariants.
inline void Absorb(std::map<std::string, Collected>& got, std::vector<RequestOutput> outputs) {
  for (RequestOutput& out : outputs) {
    {
      Collected& c = got[out.request_id];
      if (c.finish_reason != FinishReason::kNone) ++c.num_outputs_after_finish;
      c.token_ids.insert(c.token_ids.end(), out.new_token_ids.begin(), out.new_token_ids.end());
      c.logprobs.insert(c.logprobs.end(), out.new_logprobs.begin(), out.new_logprobs.end());
      c.text += out.new_text;
      c.num_cached_tokens = out.num_cached_tokens;
      EXPECT_EQ(out.num_output_tokens, static_cast<int>(c.token_ids.size())) << out.request_id;
      if (out.finished) {
        c.finish_reason = out.finish_reason;
        c.error = out.error;
      }
    }
  }
}

// Steps until no request is unfinished (bounded).
inline std::map<std::string, Collected> RunToCompletion(Engine& engine,
                                                        std::map<std::string, Collected> got = {},
                                                        int max_steps = 100000) {
  for (int step = 0; engine.HasUnfinishedRequests() && step < max_steps; ++step) {
    Absorb(got, engine.Step());
  }
  EXPECT_FALSE(engine.HasUnfinishedRequests());
  for (const auto& [id, c] : got) EXPECT_EQ(c.num_outputs_after_finish, 0) << id;
  return got;
}

inline SamplingParams Greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

}  // namespace tandem::testing
