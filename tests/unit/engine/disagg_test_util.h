// In-process disaggregation for engine tests: a decode engine hands out RemotePrefillTasks, a
// prefill engine computes them holding its blocks, and the KV of the blocks decode lacks is copied
// between the two runners' pools (what the transfer agent does across processes).
#pragma once

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine_test_util.h"

namespace tandem::testing {

struct DisaggCounters {
  int num_transfers = 0;
  int64_t num_blocks_copied = 0;
  int64_t bytes_copied = 0;
};

// Prefills one task on `prefill` and writes the blocks decode lacks into `decode`'s pool.
// Returns the first token (and its logprob entry, if asked) through CompleteRemotePrefill.
inline void ServeRemotePrefill(Engine& prefill, ModelRunner& prefill_runner, Engine& decode,
                               ModelRunner& decode_runner, const RemotePrefillTask& task,
                               int block_size, DisaggCounters* counters) {
  SamplingParams p = task.params;
  p.max_tokens = 1;
  p.stop.clear();  // the first token's stop checks happen on decode
  p.ignore_eos = true;
  RequestOptions options;
  options.hold_blocks = true;
  const std::string id = "prefill-" + task.request_id;
  ASSERT_TRUE(prefill.AddRequest(id, task.prompt_token_ids, p, options).ok());
  std::map<std::string, Collected> got;
  std::vector<int> held;
  for (int i = 0; i < 100000 && prefill.HasUnfinishedRequests(); ++i) {
    for (RequestOutput& out : prefill.Step()) {
      if (out.request_id == id && out.finished) held = out.held_block_ids;
      Absorb(got, {out});
    }
  }
  const Collected& c = got[id];
  ASSERT_EQ(c.token_ids.size(), 1u);
  ASSERT_EQ(held.size(), task.block_ids.size());
  KVCacheLayout src = prefill_runner.kv_cache_layout();
  KVCacheLayout dst = decode_runner.kv_cache_layout();
  ASSERT_EQ(src.layer_base.size(), dst.layer_base.size());
  ASSERT_EQ(src.block_bytes, dst.block_bytes);
  const size_t first = static_cast<size_t>(task.num_cached_tokens / block_size);
  for (size_t b = first; b < held.size(); ++b) {
    for (size_t l = 0; l < src.layer_base.size(); ++l) {
      std::memcpy(static_cast<char*>(dst.layer_base[l]) + task.block_ids[b] * dst.block_bytes,
                  static_cast<const char*>(src.layer_base[l]) + held[b] * src.block_bytes,
                  src.block_bytes);
      counters->bytes_copied += static_cast<int64_t>(src.block_bytes);
    }
    ++counters->num_blocks_copied;
  }
  ++counters->num_transfers;
  prefill.ReleaseHeldBlocks(id);
  ASSERT_TRUE(decode.CompleteRemotePrefill(task.request_id, c.token_ids[0], c.logprobs).ok());
}

// Steps `decode` to completion, serving its remote prefills on `prefill` as they appear.
inline std::map<std::string, Collected> RunDisaggregated(Engine& decode, ModelRunner& decode_runner,
                                                         Engine& prefill,
                                                         ModelRunner& prefill_runner,
                                                         int block_size, DisaggCounters* counters,
                                                         bool fail_remote = false) {
  std::map<std::string, Collected> got;
  for (int step = 0; step < 100000; ++step) {
    Absorb(got, decode.Step());
    auto tasks = decode.TakeRemotePrefillTasks();
    for (const RemotePrefillTask& task : tasks) {
      if (fail_remote) {
        EXPECT_TRUE(decode.FailRemotePrefill(task.request_id).ok());
      } else {
        ServeRemotePrefill(prefill, prefill_runner, decode, decode_runner, task, block_size,
                           counters);
      }
    }
    if (!decode.HasUnfinishedRequests() && tasks.empty()) break;
  }
  EXPECT_FALSE(decode.HasUnfinishedRequests());
  return got;
}

}  // namespace tandem::testing
