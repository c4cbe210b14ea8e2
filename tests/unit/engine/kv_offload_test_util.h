// What the engine tests of the KV offload tiers share (kv_offload_*_test.cc): the bundled tiny
// model's prompts of 5 full 16-token blocks and 10 tokens more, and waves of requests run one after
// another, so that later waves evict an earlier prompt's blocks from a small pool.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine_test_util.h"

namespace tandem::testing {

inline constexpr int kOffloadBlock = 16;
inline constexpr int kOffloadPromptTokens = 90;  // 5 full blocks + 10 tokens

// A prompt of kOffloadPromptTokens token ids, one per seed.
inline std::vector<int32_t> OffloadPrompt(int seed) {
  std::vector<int32_t> p;
  for (int i = 0; i < kOffloadPromptTokens; ++i) p.push_back(100 + (seed * 7919 + i * 104729) % 5000);
  return p;
}

// Waves of (request id, prompt seed): each wave added, then run to completion (12 greedy tokens).
using OffloadWaves = std::vector<std::vector<std::pair<std::string, int>>>;
inline std::map<std::string, Collected> RunWaves(Engine& engine, const OffloadWaves& waves,
                                                 std::map<std::string, Collected> got = {}) {
  for (const auto& wave : waves) {
    for (const auto& [id, seed] : wave) {
      EXPECT_TRUE(engine.AddRequest(id, OffloadPrompt(seed), Greedy(12)).ok()) << id;
    }
    got = RunToCompletion(engine, std::move(got));
  }
  return got;
}

}  // namespace tandem::testing
