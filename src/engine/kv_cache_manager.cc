#include "engine/kv_cache_manager.h"

#include <algorithm>
#include <cassert>

namespace tandem {

KVCacheManager::KVCacheManager(int num_blocks, int block_size, bool enable_prefix_caching)
    : block_size_(block_size), enable_prefix_caching_(enable_prefix_caching), pool_(num_blocks) {}

CachedPrefix KVCacheManager::FindCachedPrefix(std::span<const uint64_t> block_hashes,
                                              int num_tokens) const {
  CachedPrefix prefix;
  if (!enable_prefix_caching_ || num_tokens <= 0) return prefix;
  // At least the last token must be computed.
  const size_t max_blocks =
      std::min(block_hashes.size(), static_cast<size_t>((num_tokens - 1) / block_size_));
  size_t i = 0;
  for (; i < max_blocks; ++i) {
    auto id = pool_.Lookup(block_hashes[i]);
    if (!id) break;
    prefix.block_ids.push_back(*id);
  }
  // The chain goes on in the tier below (a block there whose parent was evicted from the pool
  // too is found the same way: the chain's hashes name the whole prefix).
  for (; tier_ != nullptr && i < max_blocks && tier_->Contains(block_hashes[i]); ++i) {
    prefix.tier_hashes.push_back(block_hashes[i]);
  }
  for (size_t j = i; tier_ != nullptr && j < max_blocks && tier_->InLowerTier(block_hashes[j]); ++j) {
    ++prefix.lower_tier_blocks;
  }
  prefix.num_tokens = static_cast<int>(prefix.block_ids.size() + prefix.tier_hashes.size()) * block_size_;
  return prefix;
}

int KVCacheManager::FetchLowerTier(const CachedPrefix& prefix, std::span<const uint64_t> block_hashes) {
  if (tier_ == nullptr || prefix.lower_tier_blocks == 0) return 0;
  const size_t from = prefix.block_ids.size();
  const size_t n = prefix.tier_hashes.size() + static_cast<size_t>(prefix.lower_tier_blocks);
  if (from + n > block_hashes.size()) return 0;
  return tier_->FetchFromLowerTier(block_hashes.subspan(from, n), prefix.tier_hashes.size());
}

void KVCacheManager::SetTier(kvtier::KvTierIndex* tier) {
  tier_ = tier;
  pool_.set_reuse_log(tier != nullptr ? &evicted_ : nullptr);
  if (tier_ != nullptr && events_) tier_->EnableTierEvents();
}

bool KVCacheManager::AllocateSlots(const std::string& request_id, int num_total_tokens,
                                   const CachedPrefix* prefix) {
  auto it = requests_.find(request_id);
  const int held = it == requests_.end() ? 0 : static_cast<int>(it->second.block_ids.size());
  const bool use_prefix = prefix != nullptr && held == 0 &&
                          (!prefix->block_ids.empty() || !prefix->tier_hashes.empty());
  const int num_prefix = use_prefix ? static_cast<int>(prefix->block_ids.size()) : 0;
  const int need = std::max(0, BlocksFor(num_total_tokens) - held - num_prefix);

  // Hits on free cached blocks take them out of the free pool.
  int num_prefix_free = 0;
  if (use_prefix) {
    for (int id : prefix->block_ids) num_prefix_free += pool_.ref_count(id) == 0 ? 1 : 0;
  }
  if (need + num_prefix_free > pool_.num_free_blocks()) return false;
  if (need == 0 && !use_prefix && it != requests_.end()) return true;

  RequestBlocks& rb = requests_[request_id];
  if (use_prefix) {
    pool_.Touch(prefix->block_ids);  // before Allocate, so they cannot be evicted by it
    rb.block_ids = prefix->block_ids;
    rb.num_cached_blocks = num_prefix;
  }
  if (need > 0) {
    const int hint = rb.block_ids.empty() ? -1 : rb.block_ids.back();
    auto fresh = pool_.Allocate(need, hint);
    assert(fresh.has_value());
    rb.block_ids.insert(rb.block_ids.end(), fresh->begin(), fresh->end());
  }
  if (use_prefix && tier_ != nullptr) {
    // The tier's blocks go into the first fresh blocks: registered now (a request admitted later
    // in this step finds them in the pool; the copy runs before any forward pass reads them).
    size_t i = 0;
    for (; i < prefix->tier_hashes.size(); ++i) {
      const uint64_t h = prefix->tier_hashes[i];
      // Cannot fail: the tier changes only between steps (KvOffloader::BeforeForward), and the
      // lookup ran in this step's scheduling.
      const bool pinned = tier_->Pin(h);
      assert(pinned);
      if (!pinned) break;
      const size_t at = static_cast<size_t>(num_prefix) + i;
      const uint64_t parent = at == 0 ? 0 : (i == 0 ? *pool_.block_hash(rb.block_ids[at - 1])
                                                    : prefix->tier_hashes[i - 1]);
      (void)pool_.CacheBlock(rb.block_ids[at], h, parent);
      onboard_.push_back({rb.block_ids[at], h});
      if (async_onboard_) {
        landing_.insert(rb.block_ids[at]);
        pool_.Touch(std::span<const int>(&rb.block_ids[at], 1));  // the landing reference
      }
    }
    rb.num_cached_blocks = num_prefix + static_cast<int>(i);
  }
  return true;
}

void KVCacheManager::CacheComputedBlocks(const std::string& request_id,
                                         std::span<const uint64_t> block_hashes,
                                         int num_computed_tokens) {
  if (!enable_prefix_caching_) return;
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  RequestBlocks& rb = it->second;
  const int num_full = std::min({num_computed_tokens / block_size_,
                                 static_cast<int>(block_hashes.size()),
                                 static_cast<int>(rb.block_ids.size())});
  for (int i = rb.num_cached_blocks; i < num_full; ++i) {
    // False when an identical block computed by another request is cached already: this copy
    // then stays uncached and is recycled first when freed.
    (void)pool_.CacheBlock(rb.block_ids[i], block_hashes[i], i == 0 ? 0 : block_hashes[i - 1]);
  }
  rb.num_cached_blocks = std::max(rb.num_cached_blocks, num_full);
}

bool KVCacheManager::Landing(const std::string& request_id) const {
  if (landing_.empty()) return false;
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return false;
  for (int id : it->second.block_ids) {
    if (landing_.count(id) != 0) return true;
  }
  return false;
}

void KVCacheManager::MarkLanded(std::span<const int> block_ids) {
  for (int id : block_ids) {
    if (landing_.erase(id) != 0) pool_.Free(std::span<const int>(&id, 1));
  }
}

void KVCacheManager::Free(const std::string& request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  std::vector<int> reversed(it->second.block_ids.rbegin(), it->second.block_ids.rend());
  pool_.Free(reversed);
  requests_.erase(it);
}

void KVCacheManager::EnableEvents() {
  if (events_) return;
  events_ = std::make_unique<KvEventRecorder>();
  pool_.set_event_recorder(events_.get());
  if (tier_ != nullptr) tier_->EnableTierEvents();
}

std::vector<KvEvent> KVCacheManager::TakeEvents() {
  if (!events_) return {};
  if (tier_ != nullptr) {  // the tiers' changes of this step, after the pool's
    std::vector<kvtier::TierEvent> tier_events;
    tier_->TakeTierEvents(&tier_events);
    for (const kvtier::TierEvent& e : tier_events) {
      const KvTier tier = static_cast<KvTier>(e.tier);
      if (e.stored) events_->Stored(e.parent, e.hash, tier);
      else events_->Removed(e.hash, tier);
    }
  }
  if (events_->empty()) return {};
  return events_->Take();
}

KvCacheSnapshot KVCacheManager::Snapshot() const {
  KvCacheSnapshot snapshot;
  snapshot.last_event_id = events_ ? events_->last_event_id() : 0;
  snapshot.blocks = pool_.CachedBlocks();
  if (tier_ != nullptr) {
    std::vector<kvtier::TierBlock> blocks;
    tier_->ListTierBlocks(&blocks);
    for (const kvtier::TierBlock& b : blocks) {
      snapshot.blocks.push_back({b.hash, b.parent, static_cast<KvTier>(b.tier)});
    }
  }
  return snapshot;
}

const std::vector<int>& KVCacheManager::GetBlockIds(const std::string& request_id) const {
  static const std::vector<int> kEmpty;
  auto it = requests_.find(request_id);
  return it == requests_.end() ? kEmpty : it->second.block_ids;
}

}  // namespace tandem
