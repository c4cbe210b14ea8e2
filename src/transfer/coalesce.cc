#include "transfer/coalesce.h"

namespace tandem::transfer {

namespace {

// Index of a region of `regions` containing `d`, trying `hint` first; -1 if none.
int FindRegion(const std::vector<RegionInfo>& regions, MemoryKind kind, const Descriptor& d, int hint) {
  if (hint >= 0 && Contains(regions[hint], kind, d)) return hint;
  for (size_t i = 0; i < regions.size(); ++i) {
    if (Contains(regions[i], kind, d)) return static_cast<int>(i);
  }
  return -1;
}

// `d` starts inside `region` (the caller knows: it continues a segment there) and ends inside it
// too. Contains() less the kind, device and start checks the caller has made.
bool EndsInside(const RegionInfo& region, const Descriptor& d) {
  const uint64_t end = region.addr + region.len;
  return d.addr <= end && d.len <= end - d.addr;
}

}  // namespace

Result<std::vector<Segment>> Coalesce(const DescList& local, const DescList& remote,
                                      const std::vector<RegionInfo>& local_regions,
                                      const std::vector<RegionInfo>& remote_regions) {
  if (local.descs.size() != remote.descs.size()) {
    return Err(StatusCode::kInvalidArgument, "{} local descriptors but {} remote ones", local.descs.size(),
               remote.descs.size());
  }
  if (local.descs.empty()) return Err(StatusCode::kInvalidArgument, "empty descriptor lists");
  std::vector<Segment> out;
  int last_l = -1, last_r = -1;  // regions of the current segment
  for (size_t i = 0; i < local.descs.size(); ++i) {
    const Descriptor& l = local.descs[i];
    const Descriptor& r = remote.descs[i];
    if (!out.empty()) {
      // The pair continues the current segment on both sides (same devices) and ends inside its
      // two regions: merged, without a region lookup (the only way pairs merge).
      Segment& s = out.back();
      if (l.len == r.len && l.len != 0 && s.local_addr + s.len == l.addr && s.remote_addr + s.len == r.addr &&
          s.local_device == l.device_id && s.remote_device == r.device_id &&
          EndsInside(local_regions[last_l], l) && EndsInside(remote_regions[last_r], r)) {
        s.len += l.len;
        continue;
      }
    }
    if (l.len != r.len) {
      return Err(StatusCode::kInvalidArgument, "descriptor pair {}: local length {} != remote length {}", i, l.len,
                 r.len);
    }
    if (l.len == 0) return Err(StatusCode::kInvalidArgument, "descriptor pair {} has length 0", i);
    int li = FindRegion(local_regions, local.kind, l, last_l);
    if (li < 0) {
      return Err(StatusCode::kInvalidArgument, "local descriptor {} ({:#x}+{}) lies outside our registered {} memory",
                 i, l.addr, l.len, MemoryKindName(local.kind));
    }
    int ri = FindRegion(remote_regions, remote.kind, r, last_r);
    if (ri < 0) {
      return Err(StatusCode::kInvalidArgument,
                 "remote descriptor {} ({:#x}+{}) lies outside the peer's registered {} memory", i, r.addr, r.len,
                 MemoryKindName(remote.kind));
    }
    out.push_back({l.addr, r.addr, l.len, l.device_id, r.device_id});
    last_l = li;
    last_r = ri;
  }
  return out;
}

}  // namespace tandem::transfer
