// The model's sampling defaults (ParseOptions::sampling_defaults, from generation_config.json):
// a request that leaves a key out gets the default, one that sets it keeps its own value, on both
// endpoints; without defaults, OpenAI's (temperature 1, top_p 1, no top_k).
#include <string>

#include <gtest/gtest.h>

#include "frontend/openai_request.h"

namespace tandem {
namespace {

openai::ParsedRequest Parse(openai::Endpoint endpoint, const std::string& body, const SamplingDefaults& d) {
  openai::ParseOptions options{"m", 16};
  options.sampling_defaults = d;
  openai::ParsedRequest req;
  auto e = openai::ParseRequest(endpoint, body, options, &req);
  EXPECT_FALSE(e) << e->message;
  return req;
}

SamplingDefaults Qwen3() {
  SamplingDefaults d;
  d.temperature = 0.6f;
  d.top_k = 20;
  d.top_p = 0.95f;
  return d;
}

TEST(SamplingDefaults, AbsentKeysTakeTheModelsDefaults) {
  for (auto [endpoint, body] :
       {std::pair{openai::Endpoint::kChatCompletions, std::string(R"({"messages":[{"role":"user","content":"hi"}]})")},
        std::pair{openai::Endpoint::kCompletions, std::string(R"({"prompt":"hi"})")}}) {
    const auto req = Parse(endpoint, body, Qwen3());
    EXPECT_FLOAT_EQ(req.params.temperature, 0.6f);
    EXPECT_EQ(req.params.top_k, 20);
    EXPECT_FLOAT_EQ(req.params.top_p, 0.95f);
    EXPECT_FLOAT_EQ(req.params.min_p, SamplingParams{}.min_p);
    EXPECT_FLOAT_EQ(req.params.repetition_penalty, SamplingParams{}.repetition_penalty);
  }
}

TEST(SamplingDefaults, WhatTheRequestSetsWins) {
  SamplingDefaults d = Qwen3();
  d.min_p = 0.05f;
  d.repetition_penalty = 1.1f;
  const auto req = Parse(openai::Endpoint::kChatCompletions,
                         R"({"messages":[{"role":"user","content":"hi"}],"temperature":0,"top_k":-1,)"
                         R"("top_p":1,"min_p":0,"repetition_penalty":1})",
                         d);
  EXPECT_EQ(req.params.temperature, 0.0f);  // greedy, as asked
  EXPECT_EQ(req.params.top_k, -1);
  EXPECT_EQ(req.params.top_p, 1.0f);
  EXPECT_EQ(req.params.min_p, 0.0f);
  EXPECT_EQ(req.params.repetition_penalty, 1.0f);
}

TEST(SamplingDefaults, NoneMeansOpenAIsDefaults) {
  const auto req = Parse(openai::Endpoint::kCompletions, R"({"prompt":"hi"})", SamplingDefaults{});
  EXPECT_EQ(req.params.temperature, 1.0f);
  EXPECT_EQ(req.params.top_p, 1.0f);
  EXPECT_EQ(req.params.top_k, SamplingParams{}.top_k);
}

}  // namespace
}  // namespace tandem
