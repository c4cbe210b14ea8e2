// HostKvTier: KV blocks evicted from a worker's KV pool, kept in host memory under their chained
// block hashes (DESIGN.md section 4) so that a later request with the same prefix copies them back
// instead of recomputing them (issue 26; Dynamo KVBM's G2, vLLM's CPU offloading, SGLang HiCache).
//
// A slot holds one block of every layer: `slot_bytes` = num_layers x the pool's per-layer block
// bytes, laid out layer after layer. Slots are LRU: Reserve takes the least recently used unpinned
// slot when the tier is full. A slot being copied into the pool is pinned (Pin / Unpin) and never
// evicted meanwhile. Each slot keeps its hash and its chain parent. No checksum here: the bytes
// leave this process's memory only through the disk tier, whose writer hashes them on its own
// thread (disk_tier.h); hashing on the engine thread cost ~0.2 ms per 2.36 MB block (Qwen3-8B,
// bench/kvtier_bench), a decode step for every ~30 blocks evicted.
//
// Not thread-safe: owned by one engine thread (KvOffloader).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tandem::kvtier {

// A tier below the pool, as KV events name it (engine/kv_events.h's KvTier: 0 is the pool).
enum class TierKind : uint8_t { kHost = 1, kDisk = 2 };
// A block that became findable in a tier, or stopped being (for the router's KV events).
struct TierEvent {
  bool stored = true;
  TierKind tier = TierKind::kHost;
  uint64_t hash = 0;
  uint64_t parent = 0;  // stored only
};
struct TierBlock {
  TierKind tier = TierKind::kHost;
  uint64_t hash = 0;
  uint64_t parent = 0;
};

// What the KV cache manager asks of the tiers below the pool (engine/kv_cache_manager.h).
class KvTierIndex {
 public:
  virtual ~KvTierIndex() = default;
  // Whether a block with this chained hash can be copied back into the pool.
  virtual bool Contains(uint64_t block_hash) const = 0;
  // Keeps that block until Unpin (a pool block is being filled from it). False when absent.
  virtual bool Pin(uint64_t block_hash) = 0;
  virtual void Unpin(uint64_t block_hash) = 0;
  // A block a slower tier (disk) holds and this one does not: it counts as cached only once
  // FetchFromLowerTier has brought it up (a read of its own, checked against its checksum).
  virtual bool InLowerTier(uint64_t /*block_hash*/) const { return false; }
  // `chain`: a prefix's blocks this tier holds (the first `num_here`), then those a slower tier
  // holds. Starts bringing the latter up, in order, as far as this tier can hold them beside the
  // former; those already on their way count too. Returns how many are on their way (0: the caller
  // should not wait).
  virtual int FetchFromLowerTier(std::span<const uint64_t> /*chain*/, size_t /*num_here*/) { return 0; }
  // The tiers' changes since the last call, in order (appended to `out`); and every block the
  // tiers hold now, consistent with the changes taken so far.
  virtual void EnableTierEvents() {}  // until called, nothing is recorded
  virtual void TakeTierEvents(std::vector<TierEvent>* /*out*/) {}
  virtual void ListTierBlocks(std::vector<TierBlock>* /*out*/) const {}
};

struct HostTierStats {
  int64_t blocks = 0;           // slots holding a block now
  int64_t capacity_blocks = 0;  // slots in all
  uint64_t stored = 0;          // blocks stored since start
  uint64_t evicted = 0;         // blocks dropped for room since start
  uint64_t hits = 0;            // lookups that found a block (Pin)
};

class HostKvTier : public KvTierIndex {
 public:
  // `capacity_bytes` / `slot_bytes` slots (0 slots: every Store fails), allocated up front by
  // `alloc` (nullptr: operator new; a GPU worker passes a pinned allocator) and released by `free`.
  using Alloc = std::function<void*(size_t bytes)>;
  using Free = std::function<void(void* p)>;
  HostKvTier(size_t slot_bytes, size_t capacity_bytes, Alloc alloc = nullptr, Free free = nullptr);
  ~HostKvTier() override;
  HostKvTier(const HostKvTier&) = delete;
  HostKvTier& operator=(const HostKvTier&) = delete;

  size_t slot_bytes() const { return slot_bytes_; }
  int capacity_blocks() const { return static_cast<int>(slots_.size()); }

  bool Contains(uint64_t block_hash) const override { return index_.count(block_hash) > 0; }
  bool Pin(uint64_t block_hash) override;
  void Unpin(uint64_t block_hash) override;

  // A slot for `block_hash` to be filled (SlotData) and then committed, taking the least recently
  // used unpinned slot when full. nullopt when the hash is stored already or every slot is pinned.
  // Until Commit the slot is not Contained.
  std::optional<int> Reserve(uint64_t block_hash, uint64_t parent_hash);
  // Makes a reserved slot findable (its bytes may still be landing: the caller Holds it until then).
  void Commit(int slot);
  // Gives a reserved slot back unfilled.
  void Abandon(int slot);

  // The slot holding this hash (committed), or nullopt; marks it most recently used.
  std::optional<int> Find(uint64_t block_hash);
  std::byte* SlotData(int slot) { return data_ + static_cast<size_t>(slot) * slot_bytes_; }
  const std::byte* SlotData(int slot) const { return data_ + static_cast<size_t>(slot) * slot_bytes_; }
  uint64_t parent_hash(int slot) const { return slots_[slot].parent; }
  uint64_t hash(int slot) const { return slots_[slot].hash; }
  // Keeps a committed slot from being reused (a write to a slower tier reads it), without counting
  // a hit; Unhold undoes one Hold.
  void Hold(int slot) { AddPin(slot); }
  void Unhold(int slot) { DropPin(slot); }
  // Slots that Reserve cannot take now: pinned or held, or reserved and not yet committed.
  int num_unavailable() const { return pinned_slots_ + static_cast<int>(reserved_.size()); }
  // Drops a committed block (its bytes are not to be trusted: a device copy into it failed).
  void Drop(uint64_t block_hash);

  HostTierStats stats() const;
  // Hashes of committed blocks dropped for room since the last call (Reserve's evictions).
  std::vector<uint64_t> TakeEvicted() { return std::exchange(evicted_log_, {}); }
  // Every committed block: (hash, parent).
  template <typename F>
  void ForEachBlock(F&& f) const {
    for (const auto& [hash, slot] : index_) f(hash, slots_[slot].parent);
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint64_t parent = 0;
    int pins = 0;
    enum class State { kFree, kReserved, kReady } state = State::kFree;
    std::list<int>::iterator lru_pos;  // valid when kReady
  };
  void Release(int slot);
  void AddPin(int slot);
  void DropPin(int slot);

  size_t slot_bytes_;
  Free free_;
  std::byte* data_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<int> free_slots_;
  std::list<int> lru_;  // ready slots, front = least recently used
  std::unordered_map<uint64_t, int> index_;  // committed hash -> slot
  std::unordered_map<uint64_t, int> reserved_;  // reserved, not yet committed
  uint64_t stored_ = 0, evicted_ = 0, hits_ = 0;
  std::vector<uint64_t> evicted_log_;
  int pinned_slots_ = 0;  // slots with pins > 0
};

}  // namespace tandem::kvtier
