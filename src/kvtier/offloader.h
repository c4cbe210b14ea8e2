// KvOffloader: moves KV blocks between a worker's KV pool and the host tier (host_tier.h), once per
// engine step, before the forward pass (issue 26).
//
// The KV cache manager (engine/kv_cache_manager.h) reports what a step's scheduling did:
// - EvictedBlock: a cached free pool block whose hash was dropped so the block could be reused.
//   Its bytes are still the cached tokens' until this step's forward pass writes the new ones, so
//   they are copied into the host tier first.
// - OnboardBlock: a fresh pool block that a request will read as the KV of a prefix block found
//   in the host tier (pinned there by the manager). Copied in after the evictions (the block may be
//   one just evicted), then unpinned.
// Host-memory pools only for now (the CPU engine): the copies are memcpy, done when BeforeForward
// returns. A device pool needs them ordered on the runner's stream (not built yet).
//
// Pool layout (KVCacheLayout, model/model_runner.h): layer l's block b is the block_bytes bytes at
// layer_base[l] + b * block_bytes; a tier slot holds the block's layers one after another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/host_tier.h"

namespace tandem::kvtier {

struct EvictedBlock {
  int block_id = 0;
  uint64_t hash = 0;
  uint64_t parent_hash = 0;
};

struct OnboardBlock {
  int block_id = 0;
  uint64_t hash = 0;
};

struct PoolRegion {
  std::vector<std::byte*> layer_base;  // [num_layers], host memory
  size_t block_bytes = 0;              // one block of one layer
};

struct OffloadStats {
  HostTierStats host;
  uint64_t offloaded_blocks = 0, offloaded_bytes = 0;
  uint64_t onboarded_blocks = 0, onboarded_bytes = 0;
  double offload_seconds = 0, onboard_seconds = 0;
  uint64_t dropped = 0;  // evicted blocks the tier had no room for (every slot pinned)
};

class KvOffloader {
 public:
  // A host tier of host_bytes for this pool (slot = num_layers x block_bytes).
  KvOffloader(PoolRegion pool, size_t host_bytes);

  KvTierIndex* index() { return &host_; }
  HostKvTier& host() { return host_; }

  // The step's copies: `evicted` out of the pool into the tier, then `onboard` from the tier into
  // the pool (each then unpinned). An onboard block missing from the tier is a caller bug: it is
  // skipped and counted in `missing` (its pool block then holds stale bytes).
  void BeforeForward(std::span<const EvictedBlock> evicted, std::span<const OnboardBlock> onboard);

  OffloadStats stats() const;
  uint64_t missing() const { return missing_; }

 private:
  PoolRegion pool_;
  HostKvTier host_;
  OffloadStats counters_;
  uint64_t missing_ = 0;
};

}  // namespace tandem::kvtier
