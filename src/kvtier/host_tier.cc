#include "kvtier/host_tier.h"

#include <cassert>
#include <new>
#include <utility>

namespace tandem::kvtier {

HostKvTier::HostKvTier(size_t slot_bytes, size_t capacity_bytes, Alloc alloc, Free free)
    : slot_bytes_(slot_bytes), free_(std::move(free)) {
  const size_t n = slot_bytes == 0 ? 0 : capacity_bytes / slot_bytes;
  if (n == 0) return;
  void* p = alloc ? alloc(n * slot_bytes) : ::operator new(n * slot_bytes, std::nothrow);
  if (p == nullptr) return;  // no memory: a tier of no slots
  data_ = static_cast<std::byte*>(p);
  slots_.resize(n);
  free_slots_.reserve(n);
  for (size_t i = n; i-- > 0;) free_slots_.push_back(static_cast<int>(i));
}

HostKvTier::~HostKvTier() {
  if (data_ == nullptr) return;
  if (free_) free_(data_);
  else ::operator delete(data_);
}

bool HostKvTier::Pin(uint64_t block_hash) {
  auto it = index_.find(block_hash);
  if (it == index_.end()) return false;
  AddPin(it->second);
  ++hits_;
  return true;
}

void HostKvTier::AddPin(int slot) {
  if (slots_[slot].pins++ == 0) ++pinned_slots_;
}

void HostKvTier::DropPin(int slot) {
  Slot& s = slots_[slot];
  if (s.pins > 0 && --s.pins == 0) --pinned_slots_;
}

void HostKvTier::Unpin(uint64_t block_hash) {
  auto it = index_.find(block_hash);
  if (it == index_.end()) return;
  DropPin(it->second);
}

std::optional<int> HostKvTier::Reserve(uint64_t block_hash, uint64_t parent_hash) {
  if (index_.count(block_hash) || reserved_.count(block_hash)) return std::nullopt;
  int slot = -1;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    for (int id : lru_) {  // least recently used first, skipping the pinned
      if (slots_[id].pins == 0) {
        slot = id;
        break;
      }
    }
    if (slot < 0) return std::nullopt;
    evicted_log_.push_back(slots_[slot].hash);
    Release(slot);
    free_slots_.pop_back();  // Release put it there
    ++evicted_;
  }
  Slot& s = slots_[slot];
  s.hash = block_hash;
  s.parent = parent_hash;
  if (s.pins > 0) --pinned_slots_;
  s.pins = 0;
  s.state = Slot::State::kReserved;
  reserved_.emplace(block_hash, slot);
  return slot;
}

void HostKvTier::Commit(int slot) {
  Slot& s = slots_[slot];
  assert(s.state == Slot::State::kReserved);
  reserved_.erase(s.hash);
  s.state = Slot::State::kReady;
  s.lru_pos = lru_.insert(lru_.end(), slot);
  index_.emplace(s.hash, slot);
  ++stored_;
}

void HostKvTier::Abandon(int slot) {
  Slot& s = slots_[slot];
  assert(s.state == Slot::State::kReserved);
  reserved_.erase(s.hash);
  s.state = Slot::State::kFree;
  free_slots_.push_back(slot);
}

std::optional<int> HostKvTier::Find(uint64_t block_hash) {
  auto it = index_.find(block_hash);
  if (it == index_.end()) return std::nullopt;
  Slot& s = slots_[it->second];
  lru_.splice(lru_.end(), lru_, s.lru_pos);
  return it->second;
}

void HostKvTier::Drop(uint64_t block_hash) {
  auto it = index_.find(block_hash);
  if (it != index_.end()) Release(it->second);
}

void HostKvTier::Release(int slot) {
  Slot& s = slots_[slot];
  assert(s.state == Slot::State::kReady);
  index_.erase(s.hash);
  lru_.erase(s.lru_pos);
  s.state = Slot::State::kFree;
  if (s.pins > 0) --pinned_slots_;
  s.pins = 0;
  free_slots_.push_back(slot);
}

HostTierStats HostKvTier::stats() const {
  HostTierStats st;
  st.blocks = static_cast<int64_t>(index_.size());
  st.capacity_blocks = static_cast<int64_t>(slots_.size());
  st.stored = stored_;
  st.evicted = evicted_;
  st.hits = hits_;
  return st;
}

}  // namespace tandem::kvtier
