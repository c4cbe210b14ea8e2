// BlockPool: the fixed set of KV block ids of one worker, with reference counts and the prefix
// cache's hash -> block map (vLLM v1's BlockPool).
//
// A block is in use (ref_count > 0) or free. Free blocks are of two kinds:
//   - uncached (no hash): reused first, preferring runs of consecutive ids;
//   - cached (they keep the hash of the tokens they hold and stay findable by Lookup): kept in an
//     LRU queue in the order they were freed and evicted (hash dropped) least-recently-freed first,
//     only when no uncached free block is left.
// A cache hit on a free cached block takes it out of the queue (Touch).
//
// KV events (kv_events.h): with a recorder attached (set_event_recorder), a block that becomes
// findable under a hash records stored{parent_hash, [hash]}, an evicted hash records removed, and
// EvictAllCached that leaves nothing cached records cleared. Without one, nothing is recorded.
//
// Reuse log (set_reuse_log): Allocate appends each cached block it evicts to reuse, with its
// hash, before dropping it, so the KV offloader (kvtier/offloader.h) can copy its bytes out before
// the block is written again. EvictAllCached (a reset) does not log.
//
// Not thread-safe; owned by one KVCacheManager. "No room" is std::nullopt, never an error.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/kv_events.h"
#include "kvtier/offloader.h"

namespace tandem {

class BlockPool {
 public:
  explicit BlockPool(int num_blocks);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int num_used_blocks() const { return num_used_; }                   // ref_count > 0
  int num_free_blocks() const { return num_blocks() - num_used_; }    // allocatable (evicting)
  int num_cached_blocks() const { return static_cast<int>(hash_to_block_.size()); }

  // n fresh blocks (ref_count 1, no hash), or nullopt when fewer than n are free (nothing changes
  // then). Prefers the ids right after `hint_after` (a request's last block) and otherwise the first
  // run of consecutive free ids long enough; cached free blocks are evicted only when needed.
  std::optional<std::vector<int>> Allocate(int n, int hint_after = -1);

  // The block holding the tokens of this chained block hash (in use or free), if any.
  std::optional<int> Lookup(uint64_t block_hash) const;

  // One more reference on each block (prefix cache hits); free cached blocks leave the LRU queue.
  void Touch(std::span<const int> block_ids);

  // Marks an in-use block as holding the tokens of `block_hash` (whose chain parent is
  // `parent_hash`, 0 for a first block). False (and the block stays uncached) when another block
  // already holds that hash or this block already has a hash.
  bool CacheBlock(int block_id, uint64_t block_hash, uint64_t parent_hash = 0);

  // One reference less per block, in the given order. A block reaching 0 becomes free: a cached
  // one goes to the tail of the LRU queue (evicted last), an uncached one is reusable at once.
  void Free(std::span<const int> block_ids);

  // Drops the hashes of all free cached blocks. Returns their number.
  int EvictAllCached();

  // Records KV events into `recorder` from now on (null: stop). Not owned; must outlive the pool
  // or be detached.
  void set_event_recorder(KvEventRecorder* recorder) { events_ = recorder; }
  // Logs cached blocks evicted for reuse into `log` from now on (null: stop). Not owned.
  void set_reuse_log(std::vector<kvtier::EvictedBlock>* log) { evicted_ = log; }
  // Every cached block (in use or free) with its parent hash, in block id order.
  std::vector<KvCachedBlock> CachedBlocks() const;

  int ref_count(int block_id) const { return blocks_[block_id].ref_count; }
  std::optional<uint64_t> block_hash(int block_id) const;
  // Free cached blocks, least-recently-freed first (the eviction order).
  std::vector<int> LruOrder() const { return {lru_.begin(), lru_.end()}; }

 private:
  struct Block {
    int ref_count = 0;
    bool has_hash = false;
    uint64_t hash = 0;
    uint64_t parent_hash = 0;
    std::list<int>::iterator lru_pos;  // valid when free and cached
  };
  void TakeUncached(int id, std::vector<int>* out);
  void Evict(int id);

  std::vector<Block> blocks_;
  int num_used_ = 0;
  std::set<int> free_uncached_;  // sorted ids: runs of consecutive ids are cheap to find
  std::list<int> lru_;           // free cached blocks, front = least recently freed
  std::unordered_map<uint64_t, int> hash_to_block_;
  KvEventRecorder* events_ = nullptr;
  std::vector<kvtier::EvictedBlock>* evicted_ = nullptr;
};

}  // namespace tandem
