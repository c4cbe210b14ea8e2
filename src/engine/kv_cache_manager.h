// KVCacheManager: which KV blocks each request holds, prefix cache lookups, and caching of
// computed full blocks (vLLM v1's KVCacheManager). The scheduler talks to this class only; the
// BlockPool's free queue is its business.
//
// Token at position p of a request lives in block GetBlockIds(id)[p / block_size], slot
// p % block_size. Block hashes are DESIGN.md section 4's chained hashes (block_hash.h).
//
// KV events (kv_events.h) for the router: after EnableEvents, every hash the pool starts or stops
// serving is recorded; TakeEvents numbers and returns them (the engine publishes them once per
// step). Zero cost while disabled.
//
// A tier below the pool (SetTier: the KV offloader's host tier, kvtier/offloader.h): cached blocks
// evicted for reuse are logged (TakeEvicted) so their bytes can be saved before the step's forward
// pass; a prefix lookup continues into the tier after the pool's last hit, and AllocateSlots gives
// those blocks fresh pool blocks, registers their hashes at once and logs the copies to make
// (TakeOnboard, the tier's blocks pinned until then). The engine runs both before the forward.
// With asynchronous onboarding (set_async_onboard: a device runner copies on a side stream) those
// blocks are also "landing" until MarkLanded: a request holding one must not be computed, and the
// manager holds an extra reference on each so that no other request can reuse it meanwhile, even
// if its own request is freed.
#pragma once

#include <cstdint>
#include <span>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "engine/block_pool.h"
#include "kvtier/offloader.h"

namespace tandem {

// Blocks found in the prefix cache for a request that holds no blocks yet: in the pool, then
// (with a tier, SetTier) the chain's next hashes found in the tier below it.
struct CachedPrefix {
  std::vector<int> block_ids;
  std::vector<uint64_t> tier_hashes;  // after block_ids; AllocateSlots plans their onboarding
  int num_tokens = 0;  // (block_ids.size() + tier_hashes.size()) * block_size
  // The chain's next blocks after those, held only by a slower tier (disk): not cached yet;
  // FetchLowerTier brings them up for a later lookup.
  int lower_tier_blocks = 0;
};

class KVCacheManager {
 public:
  KVCacheManager(int num_blocks, int block_size, bool enable_prefix_caching);

  int block_size() const { return block_size_; }
  int num_blocks() const { return pool_.num_blocks(); }
  int num_used_blocks() const { return pool_.num_used_blocks(); }
  int num_free_blocks() const { return pool_.num_free_blocks(); }
  bool prefix_caching() const { return enable_prefix_caching_; }
  // Blocks needed to hold num_tokens tokens.
  int BlocksFor(int num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

  // The longest run of leading full blocks of a sequence of num_tokens tokens whose hashes
  // (block_hashes, chained, full blocks only) are cached. Never the whole sequence: at most
  // num_tokens - 1 tokens, so the last token is computed and gives logits. Changes nothing.
  CachedPrefix FindCachedPrefix(std::span<const uint64_t> block_hashes, int num_tokens) const;

  // Makes the request's blocks cover num_total_tokens tokens (computed + about to be computed).
  // For a request with no blocks, `prefix` (from FindCachedPrefix in the same step) becomes its
  // first blocks. False when the pool has no room (then nothing changes).
  bool AllocateSlots(const std::string& request_id, int num_total_tokens,
                     const CachedPrefix* prefix = nullptr);

  // Registers the hashes of the request's full blocks among its first num_computed_tokens tokens
  // so later requests can find them. block_hashes: the request's chained full-block hashes.
  void CacheComputedBlocks(const std::string& request_id, std::span<const uint64_t> block_hashes,
                           int num_computed_tokens);

  // Releases all the request's blocks (last block first, so a request's tail is evicted before its
  // shared head). Unknown ids are ignored.
  void Free(const std::string& request_id);

  // The request's block table (empty when it holds none).
  const std::vector<int>& GetBlockIds(const std::string& request_id) const;

  // Forgets the hashes of all free blocks (cached blocks in use keep theirs).
  void ResetPrefixCache() { pool_.EvictAllCached(); }

  // The tier below the pool (null: none). Not owned; outlives the manager or is detached.
  void SetTier(kvtier::KvTierIndex* tier);
  // Starts fetching `prefix`'s lower-tier blocks (the hashes after its cached ones) up into the
  // tier; returns how many are on their way (kvtier::KvTierIndex::FetchFromLowerTier).
  int FetchLowerTier(const CachedPrefix& prefix, std::span<const uint64_t> block_hashes);
  // Cached blocks evicted for reuse, and the tier blocks to copy into the pool, since the last call.
  std::vector<kvtier::EvictedBlock> TakeEvicted() { return std::exchange(evicted_, {}); }
  std::vector<kvtier::OnboardBlock> TakeOnboard() { return std::exchange(onboard_, {}); }
  // Asynchronous onboarding (see above): onboarded blocks are landing from AllocateSlots until
  // MarkLanded (ids not landing are ignored).
  void set_async_onboard(bool on) { async_onboard_ = on; }
  bool Landing(const std::string& request_id) const;  // the request holds a landing block
  void MarkLanded(std::span<const int> block_ids);
  int num_landing() const { return static_cast<int>(landing_.size()); }

  const BlockPool& pool() const { return pool_; }

  // Starts recording KV events (idempotent). The first event taken has event_id 1.
  void EnableEvents();
  bool events_enabled() const { return events_ != nullptr; }
  // The events recorded since the last call, numbered (empty when disabled or none).
  std::vector<KvEvent> TakeEvents();
  // Every cached block; last_event_id is the last event taken so far (call TakeEvents first so the
  // snapshot includes everything recorded). The load is left for the caller.
  KvCacheSnapshot Snapshot() const;

 private:
  struct RequestBlocks {
    std::vector<int> block_ids;
    int num_cached_blocks = 0;  // leading blocks whose hashes are registered (or were hits)
  };

  int block_size_;
  bool enable_prefix_caching_;
  std::unique_ptr<KvEventRecorder> events_;  // before pool_: the pool points at it
  BlockPool pool_;
  std::unordered_map<std::string, RequestBlocks> requests_;
  kvtier::KvTierIndex* tier_ = nullptr;
  std::vector<kvtier::EvictedBlock> evicted_;
  std::vector<kvtier::OnboardBlock> onboard_;
  bool async_onboard_ = false;
  std::unordered_set<int> landing_;  // each holds one reference of its own
};

}  // namespace tandem
