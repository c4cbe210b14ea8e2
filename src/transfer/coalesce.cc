#include "transfer/coalesce.h"

namespace tandem::transfer {

namespace {

// Index of a region of `regions` containing `d`, trying `hint` and the region after it first (a
// layer-major KV write goes from one layer's region to the next one's); -1 if none.
int FindRegion(const std::vector<RegionInfo>& regions, MemoryKind kind, const Descriptor& d, int hint) {
  if (hint >= 0 && Contains(regions[hint], kind, d)) return hint;
  if (hint >= 0 && static_cast<size_t>(hint) + 1 < regions.size() && Contains(regions[hint + 1], kind, d)) {
    return hint + 1;
  }
  for (size_t i = 0; i < regions.size(); ++i) {
    if (Contains(regions[i], kind, d)) return static_cast<int>(i);
  }
  return -1;
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
  // The current segment, and where its two regions end, kept in locals: the merge below runs for
  // nearly every pair (a KV write's 64 KiB blocks, thousands per transfer).
  Segment cur;
  bool have = false;
  uint64_t l_region_end = 0, r_region_end = 0;
  for (size_t i = 0; i < local.descs.size(); ++i) {
    const Descriptor& l = local.descs[i];
    const Descriptor& r = remote.descs[i];
    // The pair continues the current segment on both sides (same devices) and ends inside its two
    // regions: merged, without a region lookup (the only way pairs merge). It starts where the
    // segment ends, inside the regions, so the end checks cannot wrap.
    if (have && l.len == r.len && l.len != 0 && cur.local_addr + cur.len == l.addr &&
        cur.remote_addr + cur.len == r.addr && cur.local_device == l.device_id && cur.remote_device == r.device_id &&
        l.len <= l_region_end - l.addr && r.len <= r_region_end - r.addr) {
      cur.len += l.len;
      continue;
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
    if (have) out.push_back(cur);
    cur = {l.addr, r.addr, l.len, l.device_id, r.device_id};
    have = true;
    last_l = li;
    last_r = ri;
    l_region_end = local_regions[li].addr + local_regions[li].len;
    r_region_end = remote_regions[ri].addr + remote_regions[ri].len;
  }
  out.push_back(cur);
  return out;
}

}  // namespace tandem::transfer
