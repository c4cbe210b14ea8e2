#include "transfer/region_table.h"

namespace tandem::transfer {

const char* MemoryKindName(MemoryKind kind) { return kind == MemoryKind::kHost ? "host" : "device"; }
const char* OpName(Op op) { return op == Op::kRead ? "READ" : "WRITE"; }
const char* LocalityName(Locality locality) {
  switch (locality) {
    case Locality::kSameProcess: return "same-process";
    case Locality::kSameNode: return "same-node";
    case Locality::kRemote: return "remote";
  }
  return "?";
}

bool Contains(const RegionInfo& region, MemoryKind kind, const Descriptor& d) {
  if (d.len == 0 || region.kind != kind || region.device_id != d.device_id) return false;
  if (d.addr < region.addr) return false;
  uint64_t offset = d.addr - region.addr;
  return offset <= region.len && d.len <= region.len - offset;
}

RegionPin& RegionPin::operator=(RegionPin&& other) noexcept {
  if (this != &other) {
    Release();
    table_ = std::move(other.table_);
    ids_ = std::move(other.ids_);
  }
  return *this;
}

void RegionPin::Release() {
  if (table_) table_->Unpin(ids_);
  table_.reset();
  ids_.clear();
}

Result<uint64_t> RegionTable::Add(uint64_t addr, uint64_t len, MemoryKind kind, int32_t device_id) {
  if (addr == 0 || len == 0) {
    return Err(StatusCode::kInvalidArgument, "cannot register an empty region (addr {:#x}, len {})", addr, len);
  }
  if (addr + len < addr) return Err(StatusCode::kInvalidArgument, "region {:#x}+{} wraps around", addr, len);
  std::lock_guard lock(mu_);
  uint64_t id = next_id_++;
  regions_[id] = Entry{RegionInfo{id, addr, len, kind, device_id}};
  return id;
}

void RegionTable::Remove(uint64_t id) {
  std::unique_lock lock(mu_);
  auto it = regions_.find(id);
  if (it == regions_.end()) return;
  it->second.removing = true;
  unpinned_.wait(lock, [&] { return it->second.pins == 0; });
  regions_.erase(it);
}

const RegionInfo* RegionTable::FindLocked(MemoryKind kind, const Descriptor& d) const {
  for (const auto& [id, e] : regions_) {
    if (!e.removing && Contains(e.info, kind, d)) return &e.info;
  }
  return nullptr;
}

Result<RegionPin> RegionTable::Pin(MemoryKind kind, std::span<const Descriptor> ranges) {
  RegionPin pin;
  std::lock_guard lock(mu_);
  pin.ids_.reserve(ranges.size());
  const RegionInfo* last = nullptr;
  auto next = regions_.end();  // the entry after last's (ranges often go from one region to the next)
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Descriptor& d = ranges[i];
    const RegionInfo* r = nullptr;
    if (last && Contains(*last, kind, d)) {
      r = last;
    } else if (next != regions_.end() && !next->second.removing && Contains(next->second.info, kind, d)) {
      r = &next->second.info;
    } else {
      r = FindLocked(kind, d);
    }
    if (r && r != last) next = std::next(regions_.find(r->id));
    if (!r) {
      return Err(StatusCode::kInvalidArgument,
                 "range {} ({:#x}+{} bytes, {} device {}) lies outside every registered region", i, d.addr,
                 d.len, MemoryKindName(kind), d.device_id);
    }
    if (r != last) pin.ids_.push_back(r->id);
    last = r;
  }
  for (uint64_t id : pin.ids_) regions_[id].pins++;
  pin.table_ = shared_from_this();
  return pin;
}

void RegionTable::Unpin(const std::vector<uint64_t>& ids) {
  {
    std::lock_guard lock(mu_);
    for (uint64_t id : ids) {
      auto it = regions_.find(id);
      if (it != regions_.end() && it->second.pins > 0) it->second.pins--;
    }
  }
  unpinned_.notify_all();
}

std::vector<RegionInfo> RegionTable::List() const {
  std::lock_guard lock(mu_);
  std::vector<RegionInfo> out;
  for (const auto& [id, e] : regions_) {
    if (!e.removing) out.push_back(e.info);
  }
  return out;
}

}  // namespace tandem::transfer
