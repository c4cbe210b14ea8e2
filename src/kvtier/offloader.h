// KvOffloader: moves KV blocks between a worker's KV pool, the host tier (host_tier.h) and, below
// it, an optional disk tier (disk_tier.h), once per engine step, before the forward pass (issue 26).
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
// ordered before the step's kernels, or with PoolCopier::layered on a side stream layer by layer,
// each of the step's layers waiting for its own copies. With an asynchronous copier, what this
// step copied into the tier is released (written through to disk, evictable) and the onboarded
// slots unpinned at the next BeforeForward, after the copier's Sync.
//
// With a disk tier: every block whose bytes landed in the host tier is also written to disk in the
// background (write-through: the host slot is held until its write finished, so that evicting it
// from the host later costs nothing). A prefix lookup that reaches blocks only the disk holds asks
// FetchFromLowerTier to read them (in the background, into host slots reserved for them, each
// checked against its checksum); the scheduler holds the request back meanwhile (SchedulerConfig::
// kv_fetch_wait_ms), and the blocks count as cached once in the host tier. A block that fails its
// check is dropped and recomputed, never served. Poll (each step, and BeforeForward) collects what
// the disk finished.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "kvtier/disk_tier.h"
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

// Below this many evicted blocks (and nothing to onboard) a step's copies out go ahead of it on
// the compute stream: a layer-wise copy makes the step run eagerly, not from its CUDA graph, which
// costs a decode step more than a few blocks' copy (a block of Qwen3-8B: 2.36 MB, ~45 us).
constexpr size_t kLayeredEvictMinBlocks = 8;

// How the offloader reaches the pool (the engine builds it from its model runner).
struct PoolCopier {
  std::function<Status(std::span<const KvBlockCopy>)> copy;  // in order, before the next forward
  std::function<Status()> sync;                            // the copies have landed
  bool async = false;  // copy returns before the bytes moved (a device pool)
  // With async: wait for the step's evicted blocks' copies, then time the onboard copies to their
  // end in BeforeForward, so that onboard_seconds is their transfer time alone (for measuring; the
  // step then waits for both before its kernels are enqueued).
  bool time_onboard = false;
  std::function<void*(size_t)> alloc;  // the tier's memory (pinned for a device pool)
  std::function<void(void*)> free;
  // Asynchronous onboarding (ModelRunner::StartKvOnboard / PollKvOnboard): set, the onboard copies
  // start on a side stream in BeforeForward and land later (TakeLanded); the pool blocks they
  // fill must stay out of every step until then (KVCacheManager's landing blocks).
  std::function<Status(std::span<const KvBlockCopy>, uint64_t* ticket)> onboard_start;
  std::function<Status(uint64_t ticket, bool wait, bool* landed, double* seconds)> onboard_poll;
  // Layer-wise copies (ModelRunner::StartKvCopiesByLayer; with async, instead of `copy` for the
  // onboard copies, and for the evicted blocks' copies of a step that onboards or evicts at least
  // layered_evict_min_blocks): the step's layers wait for their own copies, so the onboarded blocks
  // are used in this step as with `copy`, and the evicted ones leave before that layer writes;
  // `layered_seconds` gives the finished copies' device time by direction.
  std::function<Status(std::span<const KvBlockCopy>)> layered;
  std::function<KvCopySeconds()> layered_seconds;
  size_t layered_evict_min_blocks = kLayeredEvictMinBlocks;  // 0: evicted blocks never layer-wise
};

struct OffloadStats {
  HostTierStats host;
  DiskTierStats disk;       // all zero without a disk tier
  bool has_disk = false;
  uint64_t fetched_blocks = 0;        // disk -> host reads that landed and checked out
  uint64_t fetch_failed = 0;          // reads that failed their check (dropped; recomputed)
  uint64_t disk_write_skipped = 0;    // host blocks not written through (queue full, or on disk)
  uint64_t offloaded_blocks = 0, offloaded_bytes = 0;
  uint64_t onboarded_blocks = 0, onboarded_bytes = 0;
  // Seconds: the device's time of layer-wise copies (PoolCopier::layered), else the time to
  // enqueue (an async pool) or do (a host pool) them, or the landed tickets' device time.
  double offload_seconds = 0, onboard_seconds = 0;
  uint64_t dropped = 0;  // evicted blocks the tier had no room for (every slot pinned)
};

class KvOffloader : public KvTierIndex {
 public:
  // A host tier of host_bytes in slots of slot_bytes (num_layers x the pool's block bytes), and a
  // disk tier when `disk` is set (its capacity_bytes > 0; slot_bytes is set here). A disk tier that
  // cannot open is left off, with a log line saying why.
  KvOffloader(PoolCopier copier, size_t slot_bytes, size_t host_bytes,
              const DiskTierConfig* disk = nullptr, DiskIo disk_io = {});
  ~KvOffloader() override;

  KvTierIndex* index() { return this; }
  HostKvTier& host() { return host_; }
  DiskKvTier* disk() { return disk_.get(); }

  // KvTierIndex: the host tier's blocks are the cached ones; the disk's are fetched first.
  bool Contains(uint64_t block_hash) const override { return host_.Contains(block_hash); }
  bool Pin(uint64_t block_hash) override { return host_.Pin(block_hash); }
  void Unpin(uint64_t block_hash) override { host_.Unpin(block_hash); }
  bool InLowerTier(uint64_t block_hash) const override;
  int FetchFromLowerTier(std::span<const uint64_t> chain, size_t num_here) override;
  void EnableTierEvents() override;
  void TakeTierEvents(std::vector<TierEvent>* out) override;
  void ListTierBlocks(std::vector<TierBlock>* out) const override;

  // Collects the disk tier's finished writes and reads (nothing without one).
  void Poll();
  // Disk reads in flight, and a wait (at most timeout_ms) for one to finish.
  bool fetching() const { return !fetching_.empty(); }
  void WaitForFetch(int timeout_ms);

  // The step's copies: `evicted` out of the pool into the tier, then `onboard` from the tier into
  // the pool (each then unpinned). An error of the copier (or an onboard block missing from the
  // tier, a caller bug) is returned: the onboarded pool blocks may then hold stale bytes, and the
  // caller must not serve them (the engine fails the step and drops its prefix cache). With
  // asynchronous onboarding (async_onboard()) the onboard copies are started, not done: their
  // blocks come back from TakeLanded; on an error none of them was started.
  Status BeforeForward(std::span<const EvictedBlock> evicted, std::span<const OnboardBlock> onboard);

  // Waits until this step's evicted blocks have left the pool (asynchronous copies, layer-wise or
  // not), as the next BeforeForward would: before the pool blocks they left are handed to a writer
  // outside the runner's streams (a remote prefill's KV, written by the transfer agent). Without
  // it the writes and the copies out are ordered only by timing, and a write that came first
  // would be stored in the tier under the evicted block's hash. Ok at once when none is in flight;
  // a copier's error as FinishPrevious returns it (the blocks dropped from the tier).
  Status AwaitEvicted() { return landing_.empty() ? Status::Ok() : FinishPrevious(); }

  bool async_onboard() const { return static_cast<bool>(copier_.onboard_start); }
  // Onboard copies started and not yet landed.
  bool onboarding() const { return !flights_.empty(); }
  // Appends the pool blocks whose onboard copies landed since the last call (their tier blocks
  // unpinned, counted in onboarded_* and onboard_seconds: the copies' own transfer time). wait:
  // blocks until the oldest copy in flight landed first (when there is one). On an error of the
  // copier every block in flight is appended, none counted, and the error returned: their bytes
  // may not have landed (the caller fails their requests and drops its prefix cache).
  Status TakeLanded(bool wait, std::vector<int>* landed);

  OffloadStats stats() const;

 private:
  Status FinishPrevious();
  // The evicted blocks' copies (already in copies_, their slots reserved) done with status st:
  // committed and counted, or abandoned.
  void FinishEvicted(std::span<const int> slots, const Status& st);
  Status StartOnboard(std::span<const OnboardBlock> onboard);  // async_onboard()
  void WriteThrough(int slot);
  // host_.Reserve, its evictions recorded as events; and the other tier changes.
  std::optional<int> Reserve(uint64_t hash, uint64_t parent);
  void HostStored(int slot);
  void Record(bool stored, TierKind tier, uint64_t hash, uint64_t parent = 0);

  PoolCopier copier_;
  HostKvTier host_;
  std::unique_ptr<DiskKvTier> disk_;  // after host_: destroyed first (its thread reads host slots)
  std::unordered_map<uint64_t, int> fetching_;  // hash -> host slot being read into
  bool events_ = false;
  std::vector<TierEvent> tier_events_;
  std::unordered_map<uint64_t, uint64_t> disk_view_;  // the disk's blocks as polled: hash -> parent
  OffloadStats counters_;
  struct Flight {  // one step's asynchronous onboarding
    uint64_t ticket = 0;
    std::vector<int> block_ids;
    std::vector<uint64_t> hashes;  // pinned in the host tier until it lands
  };
  std::vector<Flight> flights_;         // started, in order
  std::vector<int> landing_;            // slots filled by the last step's asynchronous copies
  std::vector<uint64_t> pinned_;        // hashes onboarded by it, to unpin
  std::vector<KvBlockCopy> copies_;     // scratch
};

}  // namespace tandem::kvtier
