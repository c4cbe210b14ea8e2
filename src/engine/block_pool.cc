#include "engine/block_pool.h"

#include <cassert>

namespace tandem {

BlockPool::BlockPool(int num_blocks) : blocks_(num_blocks) {
  for (int i = 0; i < num_blocks; ++i) free_uncached_.insert(free_uncached_.end(), i);
}

void BlockPool::TakeUncached(int id, std::vector<int>* out) {
  free_uncached_.erase(id);
  Block& b = blocks_[id];
  assert(b.ref_count == 0 && !b.has_hash);
  b.ref_count = 1;
  ++num_used_;
  out->push_back(id);
}

void BlockPool::Evict(int id) {
  Block& b = blocks_[id];
  assert(b.ref_count == 0 && b.has_hash);
  lru_.erase(b.lru_pos);
  hash_to_block_.erase(b.hash);
  if (events_) events_->Removed(b.hash);
  b.has_hash = false;
  b.hash = 0;
  b.parent_hash = 0;
}

std::optional<std::vector<int>> BlockPool::Allocate(int n, int hint_after) {
  if (n < 0 || n > num_free_blocks()) return std::nullopt;
  std::vector<int> out;
  out.reserve(n);
  // 1. Continue the request's run of ids.
  for (int id = hint_after + 1; hint_after >= 0 && static_cast<int>(out.size()) < n &&
                                id < num_blocks() && free_uncached_.count(id);
       ++id) {
    TakeUncached(id, &out);
  }
  // 2. Runs of consecutive uncached free ids: the first run long enough, else the longest ones.
  while (static_cast<int>(out.size()) < n && !free_uncached_.empty()) {
    const int need = n - static_cast<int>(out.size());
    int best_start = -1, best_len = 0;
    int run_start = -1, run_len = 0, prev = -2;
    for (int id : free_uncached_) {
      if (id == prev + 1) {
        ++run_len;
      } else {
        run_start = id;
        run_len = 1;
      }
      prev = id;
      if (run_len > best_len) {
        best_len = run_len;
        best_start = run_start;
      }
      if (run_len >= need) break;
    }
    for (int k = 0; k < best_len && static_cast<int>(out.size()) < n; ++k) {
      TakeUncached(best_start + k, &out);
    }
  }
  // 3. Evict cached free blocks, least recently freed first.
  while (static_cast<int>(out.size()) < n) {
    assert(!lru_.empty());
    const int id = lru_.front();
    if (evicted_ != nullptr) {
      evicted_->push_back({id, blocks_[id].hash, blocks_[id].parent_hash});
    }
    Evict(id);
    blocks_[id].ref_count = 1;
    ++num_used_;
    out.push_back(id);
  }
  return out;
}

std::optional<int> BlockPool::Lookup(uint64_t block_hash) const {
  auto it = hash_to_block_.find(block_hash);
  if (it == hash_to_block_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::Touch(std::span<const int> block_ids) {
  for (int id : block_ids) {
    Block& b = blocks_[id];
    if (b.ref_count == 0) {
      assert(b.has_hash);  // only cached blocks can be found
      lru_.erase(b.lru_pos);
      ++num_used_;
    }
    ++b.ref_count;
  }
}

bool BlockPool::CacheBlock(int block_id, uint64_t block_hash, uint64_t parent_hash) {
  Block& b = blocks_[block_id];
  assert(b.ref_count > 0);
  if (b.has_hash) return b.hash == block_hash;
  if (hash_to_block_.count(block_hash)) return false;
  b.has_hash = true;
  b.hash = block_hash;
  b.parent_hash = parent_hash;
  hash_to_block_.emplace(block_hash, block_id);
  if (events_) events_->Stored(parent_hash, block_hash);
  return true;
}

void BlockPool::Free(std::span<const int> block_ids) {
  for (int id : block_ids) {
    Block& b = blocks_[id];
    assert(b.ref_count > 0);
    if (--b.ref_count > 0) continue;
    --num_used_;
    if (b.has_hash) {
      b.lru_pos = lru_.insert(lru_.end(), id);
    } else {
      free_uncached_.insert(id);
    }
  }
}

int BlockPool::EvictAllCached() {
  int n = 0;
  while (!lru_.empty()) {
    const int id = lru_.front();
    Evict(id);
    free_uncached_.insert(id);
    ++n;
  }
  // Nothing cached is left: one cleared{} says it (instead of the removes just recorded).
  if (events_ && n > 0 && hash_to_block_.empty()) events_->Cleared();
  return n;
}

std::vector<KvCachedBlock> BlockPool::CachedBlocks() const {
  std::vector<KvCachedBlock> out;
  out.reserve(hash_to_block_.size());
  for (const Block& b : blocks_) {
    if (b.has_hash) out.push_back({b.hash, b.parent_hash});
  }
  return out;
}

std::optional<uint64_t> BlockPool::block_hash(int block_id) const {
  const Block& b = blocks_[block_id];
  if (!b.has_hash) return std::nullopt;
  return b.hash;
}

}  // namespace tandem
