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
// The copies go through a PoolCopier: the model runner's CopyKvBlocks (model/model_runner.h),
// memcpy for a host pool, and for a device pool asynchronous copies on the runner's stream,
// ordered before the step's kernels. With an asynchronous copier, what this step copied into the
// tier is sealed (checksummed) and the onboarded slots unpinned at the next BeforeForward, after
// the copier's Sync.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "kvtier/host_tier.h"
#include "model/kv_block_copy.h"

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

// How the offloader reaches the pool (the engine builds it from its model runner).
struct PoolCopier {
  std::function<Status(std::span<const KvBlockCopy>)> copy;  // in order, before the next forward
  std::function<Status()> sync;                            // the copies have landed
  bool async = false;  // copy returns before the bytes moved (a device pool)
  // With async: wait for the onboard copies in BeforeForward, so that onboard_seconds is their
  // transfer time (for measuring; the step then waits for them before its kernels are enqueued).
  bool time_onboard = false;
  std::function<void*(size_t)> alloc;  // the tier's memory (pinned for a device pool)
  std::function<void(void*)> free;
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
  // A host tier of host_bytes in slots of slot_bytes (num_layers x the pool's block bytes).
  KvOffloader(PoolCopier copier, size_t slot_bytes, size_t host_bytes);

  KvTierIndex* index() { return &host_; }
  HostKvTier& host() { return host_; }

  // The step's copies: `evicted` out of the pool into the tier, then `onboard` from the tier into
  // the pool (each then unpinned). An error of the copier (or an onboard block missing from the
  // tier, a caller bug) is returned: the onboarded pool blocks may then hold stale bytes, and the
  // caller must not serve them (the engine fails the step and drops its prefix cache).
  Status BeforeForward(std::span<const EvictedBlock> evicted, std::span<const OnboardBlock> onboard);

  OffloadStats stats() const;

 private:
  Status FinishPrevious();

  PoolCopier copier_;
  HostKvTier host_;
  OffloadStats counters_;
  std::vector<int> unsealed_;           // slots filled by the last step's asynchronous copies
  std::vector<uint64_t> pinned_;        // hashes onboarded by it, to unpin
  std::vector<KvBlockCopy> copies_;     // scratch
};

}  // namespace tandem::kvtier
