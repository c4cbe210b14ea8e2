// The memory regions an agent registered, with pins: a transfer pins the regions it reads or
// writes, and removing a region waits until no pin holds it. This is how the receiving side of a
// backend makes sure it never touches memory outside a live registration.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/status.h"
#include "transfer/types.h"

namespace tandem::transfer {

struct RegionInfo {
  uint64_t id = 0;  // unique within the table
  uint64_t addr = 0;
  uint64_t len = 0;
  MemoryKind kind = MemoryKind::kHost;
  int32_t device_id = 0;
};

// Is [addr, addr + len) inside the region (same kind and device)? Zero-length ranges are not.
bool Contains(const RegionInfo& region, MemoryKind kind, const Descriptor& d);

class RegionTable;

// RAII: holds the pinned regions until destroyed (or Release()).
class RegionPin {
 public:
  RegionPin() = default;
  RegionPin(RegionPin&&) noexcept = default;
  RegionPin& operator=(RegionPin&& other) noexcept;
  RegionPin(const RegionPin&) = delete;
  RegionPin& operator=(const RegionPin&) = delete;
  ~RegionPin() { Release(); }
  void Release();

 private:
  friend class RegionTable;
  std::shared_ptr<RegionTable> table_;
  std::vector<uint64_t> ids_;
};

class RegionTable : public std::enable_shared_from_this<RegionTable> {
 public:
  // Errors: InvalidArgument for a null address or zero length.
  Result<uint64_t> Add(uint64_t addr, uint64_t len, MemoryKind kind, int32_t device_id);
  // Waits until no pin holds the region, then forgets it. Unknown ids are ignored.
  void Remove(uint64_t id);
  // Pins, for each range, a live region that contains it. InvalidArgument (naming the first
  // offending range) when one lies outside every registered region of `kind`.
  Result<RegionPin> Pin(MemoryKind kind, std::span<const Descriptor> ranges);
  std::vector<RegionInfo> List() const;

 private:
  const RegionInfo* FindLocked(MemoryKind kind, const Descriptor& d) const;  // mu_ held
  friend class RegionPin;
  void Unpin(const std::vector<uint64_t>& ids);

  struct Entry {
    RegionInfo info;
    uint64_t pins = 0;
    bool removing = false;
  };
  mutable std::mutex mu_;
  std::condition_variable unpinned_;
  std::map<uint64_t, Entry> regions_;  // by id
  uint64_t next_id_ = 1;
};

}  // namespace tandem::transfer
