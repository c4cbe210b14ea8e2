// The profile and planner settings the planner tests share, with the numbers their hand-computed
// cases use.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/profile.h"
#include "planner/replica_planner.h"

namespace tandem::planner {

// Prefill: 512 tokens in 50 ms, 2048 in 200 ms. Decode at context 2048: batch 1 at 10 ms, 16 at
// 20 ms, 64 at 60 ms.
inline Profile TestProfile() {
  auto p = ProfileFromJson(nlohmann::json::parse(R"({"model":"m","device":"d",
    "prefill":[{"prompt_tokens":2048,"ttft_ms":200},{"prompt_tokens":512,"ttft_ms":50}],
    "decode":[{"context":2048,"batch":64,"itl_ms":60},{"context":2048,"batch":1,"itl_ms":10},
              {"context":2048,"batch":16,"itl_ms":20}]})"));
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return *p;
}

inline PlannerConfig Config() {
  PlannerConfig c;
  c.ttft_ms = 1000;
  c.itl_ms = 30;
  c.interval_s = 30;
  c.min_prefill = c.min_decode = 1;
  c.max_prefill = c.max_decode = 8;
  c.scale_down_intervals = 2;
  c.cooldown_s = 60;
  return c;
}

}  // namespace tandem::planner
