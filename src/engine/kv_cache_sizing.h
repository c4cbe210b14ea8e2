// How many KV blocks the engine's pool gets (EngineConfig, engine.h), and the profile run that
// measures a device runner's step scratch first.
//
// Order (vLLM v1's determine_available_memory): an explicit num_kv_blocks wins; else an explicit
// kv_cache_bytes; else on a device runner
//   1. a profile run: a 1-block KV pool, one step of max_num_batched_tokens prefill tokens over
//      up to max_num_seqs sequences (every logits row kept), then one decode step of max_num_seqs
//      sequences at position max_model_len - 1 (greedy, 20 logprobs): the runner's scratch grows
//      to the largest step the scheduler can build (every block table points at block 0);
//   2. kv bytes = min(gpu_memory_utilization * total - used, free) - kDeviceMemoryMarginBytes
//      - pending, where `used` is what this runner holds (DeviceMemoryInfo: weights, the
//      profile's scratch, the decode graph it captured), `free` what the device has left (other
//      processes included) and `pending` what the runner will still allocate while serving
//      (ModelRunner::PendingDeviceBytes: the other decode graphs, the sampler's buffers);
// and on a host runner kDefaultHostKVCacheBytes, capped at max_num_seqs sequences of max_model_len
// tokens (what the scheduler can hold at once). Counting only this runner's memory against the
// fraction lets several workers share one GPU (vLLM v1 does the same).
#pragma once

#include "common/status.h"
#include "engine/engine.h"
#include "model/model_runner.h"

namespace tandem {

// The pool size in blocks (not yet allocated; a profile run leaves a 1-block pool behind).
// `config` has max_model_len resolved. Errors: InvalidArgument (gpu_memory_utilization outside
// (0, 1]), ResourceExhausted (not even one block, or on a device not one max_model_len request,
// with the largest max_model_len that would fit), and the runner's errors in the profile run.
Result<int> ComputeNumKVBlocks(ModelRunner& runner, const EngineConfig& config);

}  // namespace tandem
