#include "kvtier/offloader.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/logging.h"

namespace tandem::kvtier {

namespace {
double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

KvOffloader::KvOffloader(PoolCopier copier, size_t slot_bytes, size_t host_bytes,
                         const DiskTierConfig* disk, DiskIo disk_io)
    : copier_(std::move(copier)), host_(slot_bytes, host_bytes, copier_.alloc, copier_.free) {
  if (disk == nullptr || disk->capacity_bytes == 0 || host_.capacity_blocks() == 0) return;
  DiskTierConfig c = *disk;
  c.slot_bytes = slot_bytes;
  std::string why;
  disk_ = DiskKvTier::Open(c, &why, std::move(disk_io));
  if (!disk_) {
    log::warn("kv offload: no disk tier in {}: {}", c.dir, why);
    return;
  }
  for (const auto& [h, parent] : disk_->Blocks()) disk_view_[h] = parent;
  const DiskTierStats st = disk_->stats();
  log::info("kv offload: disk tier {} of {} blocks ({:.1f} GiB, {}), {} kept from an earlier run",
            disk_->path(), st.capacity_blocks,
            static_cast<double>(st.capacity_blocks) * static_cast<double>(slot_bytes) / (1ull << 30),
            st.direct_io ? "direct I/O" : "page cache", st.recovered);
}

KvOffloader::~KvOffloader() {
  // The host slots are the source of the copies in flight: they land before the tier is freed
  // (the step's copies, layer-wise ones included, at the copier's sync; the others by ticket).
  if (copier_.async && copier_.sync && (!landing_.empty() || !pinned_.empty())) (void)copier_.sync();
  for (const Flight& f : flights_) {
    bool landed = false;
    double seconds = 0;
    (void)copier_.onboard_poll(f.ticket, /*wait=*/true, &landed, &seconds);
  }
  disk_.reset();
}

Status KvOffloader::TakeLanded(bool wait, std::vector<int>* landed) {
  auto give_back = [&](const Flight& f) {  // its blocks to the caller, its tier blocks unpinned
    landed->insert(landed->end(), f.block_ids.begin(), f.block_ids.end());
    for (uint64_t h : f.hashes) host_.Unpin(h);
  };
  size_t done = 0;
  Status st = Status::Ok();
  for (; done < flights_.size(); ++done) {
    const Flight& f = flights_[done];
    bool here = false;
    double seconds = 0;
    st = copier_.onboard_poll(f.ticket, wait && done == 0, &here, &seconds);
    if (!st.ok() || !here) break;
    give_back(f);
    counters_.onboarded_blocks += f.block_ids.size();
    counters_.onboarded_bytes += f.block_ids.size() * host_.slot_bytes();
    counters_.onboard_seconds += seconds;
  }
  if (!st.ok()) {  // nothing in flight can be trusted: every block is given back, none served
    for (; done < flights_.size(); ++done) give_back(flights_[done]);
  }
  flights_.erase(flights_.begin(), flights_.begin() + static_cast<std::ptrdiff_t>(done));
  return st;
}

void KvOffloader::Record(bool stored, TierKind tier, uint64_t hash, uint64_t parent) {
  if (tier == TierKind::kDisk) {
    if (stored) disk_view_[hash] = parent;
    else if (disk_view_.erase(hash) == 0) return;  // never reported
  }
  if (events_) tier_events_.push_back({stored, tier, hash, parent});
}

std::optional<int> KvOffloader::Reserve(uint64_t hash, uint64_t parent) {
  const std::optional<int> slot = host_.Reserve(hash, parent);
  for (uint64_t h : host_.TakeEvicted()) Record(false, TierKind::kHost, h);
  return slot;
}

void KvOffloader::HostStored(int slot) {
  Record(true, TierKind::kHost, host_.hash(slot), host_.parent_hash(slot));
}

void KvOffloader::EnableTierEvents() {
  if (events_) return;
  events_ = true;  // what the tiers hold already is in the snapshot (ListTierBlocks)
}

void KvOffloader::TakeTierEvents(std::vector<TierEvent>* out) {
  out->insert(out->end(), tier_events_.begin(), tier_events_.end());
  tier_events_.clear();
}

void KvOffloader::ListTierBlocks(std::vector<TierBlock>* out) const {
  host_.ForEachBlock([&](uint64_t h, uint64_t parent) { out->push_back({TierKind::kHost, h, parent}); });
  for (const auto& [h, parent] : disk_view_) out->push_back({TierKind::kDisk, h, parent});
}

void KvOffloader::WriteThrough(int slot) {
  if (!disk_) return;
  if (disk_->QueueWrite(host_.hash(slot), host_.parent_hash(slot), host_.SlotData(slot),
                        static_cast<uint64_t>(slot))) {
    host_.Hold(slot);
  } else {
    ++counters_.disk_write_skipped;
  }
}

bool KvOffloader::InLowerTier(uint64_t block_hash) const {
  return disk_ && !host_.Contains(block_hash) && disk_->Contains(block_hash);
}

int KvOffloader::FetchFromLowerTier(std::span<const uint64_t> chain, size_t num_here) {
  if (!disk_ || num_here > chain.size()) return 0;
  // The chain's host blocks become the most recently used, so that the slots reserved below are
  // taken from other blocks; and no more is fetched than fits beside them (a prefix longer than
  // the host tier would otherwise evict its own first blocks while its last ones arrive).
  // They are also held while slots are reserved here, so that no reservation takes one (the
  // request may still be admitted this step with them as its cached prefix).
  std::vector<int> held;
  for (size_t i = 0; i < num_here; ++i) {
    if (const std::optional<int> slot = host_.Find(chain[i])) {
      host_.Hold(*slot);
      held.push_back(*slot);
    }
  }
  const int free_now = host_.capacity_blocks() - host_.num_unavailable();
  const size_t room = static_cast<size_t>(std::max(0, free_now));
  int n = 0;
  size_t added = 0;
  for (uint64_t h : chain.subspan(num_here)) {
    if (fetching_.count(h)) {  // on its way already (its slot is reserved: not in free_now)
      ++n;
      continue;
    }
    if (added >= room) break;
    if (host_.Contains(h)) continue;  // arrived meanwhile
    const std::optional<uint64_t> parent = disk_->Parent(h);
    if (!parent) break;
    const std::optional<int> slot = Reserve(h, *parent);
    if (!slot) break;  // every host slot pinned
    if (!disk_->QueueRead(h, host_.SlotData(*slot), static_cast<uint64_t>(*slot))) {
      host_.Abandon(*slot);
      break;
    }
    fetching_[h] = *slot;
    ++n;
    ++added;
  }
  for (int slot : held) host_.Unhold(slot);
  return n;
}

void KvOffloader::Poll() {
  if (!disk_) return;
  for (const DiskKvTier::Completion& c : disk_->Poll()) {
    const int slot = static_cast<int>(c.token);
    if (c.kind == DiskKvTier::OpKind::kWrite) {
      host_.Unhold(slot);
      if (c.evicted != 0) Record(false, TierKind::kDisk, c.evicted);
      if (c.ok) Record(true, TierKind::kDisk, c.hash, c.parent);
      continue;
    }
    fetching_.erase(c.hash);
    if (c.dropped) Record(false, TierKind::kDisk, c.hash);
    if (c.ok) {
      host_.Commit(slot);
      HostStored(slot);
      ++counters_.fetched_blocks;
    } else {
      host_.Abandon(slot);
      ++counters_.fetch_failed;
    }
  }
}

void KvOffloader::WaitForFetch(int timeout_ms) {
  if (disk_ && !fetching_.empty()) disk_->WaitForCompletion(timeout_ms);
}

Status KvOffloader::FinishPrevious() {
  if (landing_.empty() && pinned_.empty()) return Status::Ok();
  const Status st = copier_.sync ? copier_.sync() : Status::Ok();
  for (int slot : landing_) {  // held since their copy was enqueued: nothing reused them
    const uint64_t hash = host_.hash(slot);
    host_.Unhold(slot);
    if (!st.ok()) {
      host_.Drop(hash);  // its bytes may not have landed: never served, never written through
      Record(false, TierKind::kHost, hash);
      continue;
    }
    WriteThrough(slot);
  }
  // Unpinned either way: a failed sync must not keep the tier's slots from ever being reused.
  for (uint64_t h : pinned_) host_.Unpin(h);
  if (st.ok() && copier_.layered_seconds) {
    const KvCopySeconds t = copier_.layered_seconds();
    counters_.offload_seconds += t.to_host;
    counters_.onboard_seconds += t.to_pool;
  }
  landing_.clear();
  pinned_.clear();
  return st;
}

void KvOffloader::FinishEvicted(std::span<const int> slots, const Status& st) {
  for (int slot : slots) {
    if (!st.ok()) {
      host_.Abandon(slot);
      continue;
    }
    host_.Commit(slot);
    HostStored(slot);
    if (copier_.async) {
      // Its bytes land with the step's copies: no fetch may take the slot before FinishPrevious.
      host_.Hold(slot);
      landing_.push_back(slot);
    } else {
      WriteThrough(slot);
    }
    ++counters_.offloaded_blocks;
    counters_.offloaded_bytes += host_.slot_bytes();
  }
  if (!st.ok()) log::warn("kv offload: copying {} evicted blocks out failed: {}", slots.size(), st.ToString());
}

Status KvOffloader::BeforeForward(std::span<const EvictedBlock> evicted,
                                  std::span<const OnboardBlock> onboard) {
  if (Status prev = FinishPrevious(); !prev.ok()) {
    for (const OnboardBlock& o : onboard) host_.Unpin(o.hash);  // the manager pinned them for us
    return prev;
  }
  Poll();
  const bool layered = static_cast<bool>(copier_.layered);
  // Layer-wise, the evicted blocks leave with the onboard copies, or alone when there are enough.
  const size_t min = copier_.layered_evict_min_blocks;
  // Only where the layer-wise copies are the step's own (async, no landing tickets): a ticketed
  // onboarding clears copies_, and a synchronous copier's slots are written through at once.
  const bool evict_layered = layered && copier_.async && !async_onboard() && min > 0 && !evicted.empty() &&
                             (!onboard.empty() || evicted.size() >= min);
  copies_.clear();
  std::vector<int> slots;
  const auto t0 = std::chrono::steady_clock::now();
  for (const EvictedBlock& e : evicted) {
    const std::optional<int> slot = Reserve(e.hash, e.parent_hash);
    if (!slot) {
      if (!host_.Contains(e.hash)) ++counters_.dropped;  // every slot pinned
      continue;
    }
    copies_.push_back({e.block_id, host_.SlotData(*slot), true});
    slots.push_back(*slot);
  }
  if (!evict_layered && !evicted.empty()) {
    FinishEvicted(slots, copier_.copy(copies_));
    counters_.offload_seconds += Since(t0);
    copies_.clear();
    slots.clear();
  }
  const size_t num_out = copies_.size();  // evicted copies riding with the layer-wise ones
  if (onboard.empty() && num_out == 0) return Status::Ok();
  if (async_onboard() && !onboard.empty()) return StartOnboard(onboard);
  // Timed: the evicted blocks' copies (enqueued just above, on the same stream) land first, so
  // that onboard_seconds is the onboard copies' own transfer time. Layer-wise copies are timed by
  // the device (FinishPrevious), never by waiting here.
  const bool timed = copier_.async && copier_.time_onboard && copier_.sync && !layered && !onboard.empty();
  Status landed = timed ? copier_.sync() : Status::Ok();
  const auto t1 = std::chrono::steady_clock::now();
  Status missing = Status::Ok();
  for (const OnboardBlock& o : onboard) {
    const std::optional<int> slot = host_.Find(o.hash);
    if (!slot) {
      missing = Err(StatusCode::kInternal, "kv offload: block {:016x} to onboard into pool block {} is not in the host tier",
                    o.hash, o.block_id);
      continue;
    }
    copies_.push_back({o.block_id, host_.SlotData(*slot), false});
  }
  Status st = !landed.ok() ? landed : layered ? copier_.layered(copies_) : copier_.copy(copies_);
  if (st.ok() && timed) st = copier_.sync();
  if (num_out > 0) FinishEvicted(slots, st);
  for (const OnboardBlock& o : onboard) {
    if (copier_.async) pinned_.push_back(o.hash);
    else host_.Unpin(o.hash);
  }
  if (st.ok()) {
    counters_.onboarded_blocks += copies_.size() - num_out;
    counters_.onboarded_bytes += (copies_.size() - num_out) * host_.slot_bytes();
  }
  // An asynchronous copy's time is its enqueueing here (the transfer is in the step's time),
  // unless time_onboard waited for it; a layer-wise one's is the device's (FinishPrevious).
  if (!layered) counters_.onboard_seconds += Since(t1);
  TANDEM_RETURN_IF_ERROR(st);
  return missing;
}

Status KvOffloader::StartOnboard(std::span<const OnboardBlock> onboard) {
  copies_.clear();
  Flight f;
  for (const OnboardBlock& o : onboard) {
    const std::optional<int> slot = host_.Find(o.hash);
    f.block_ids.push_back(o.block_id);
    f.hashes.push_back(o.hash);
    if (slot) copies_.push_back({o.block_id, host_.SlotData(*slot), false});
  }
  Status st = copies_.size() == onboard.size()
                  ? copier_.onboard_start(copies_, &f.ticket)
                  : Err(StatusCode::kInternal, "kv offload: {} blocks to onboard are not in the host tier",
                        onboard.size() - copies_.size());
  if (!st.ok()) {  // none started
    for (uint64_t h : f.hashes) host_.Unpin(h);
    return st;
  }
  flights_.push_back(std::move(f));
  return Status::Ok();
}

OffloadStats KvOffloader::stats() const {
  OffloadStats s = counters_;
  s.host = host_.stats();
  if (disk_) {
    s.disk = disk_->stats();
    s.has_disk = true;
  }
  return s;
}

}  // namespace tandem::kvtier
