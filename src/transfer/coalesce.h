// Descriptor validation and coalescing (DESIGN.md section 4: consecutive KV blocks of one layer
// pool are one contiguous region and travel as one).
#pragma once

#include <vector>

#include "common/status.h"
#include "transfer/backend.h"
#include "transfer/region_table.h"
#include "transfer/types.h"

namespace tandem::transfer {

// Pairs local.descs[i] with remote.descs[i] and merges a pair into the previous segment when it
// continues it on both sides (same devices) and the merged ranges stay inside one local and one
// remote region. Order is kept: no sorting.
// Errors (InvalidArgument): lists of different lengths, an empty list, descriptors of a pair with
// different lengths, a zero-length descriptor, a local range outside `local_regions` or a remote
// range outside `remote_regions` (regions of the list's memory kind).
Result<std::vector<Segment>> Coalesce(const DescList& local, const DescList& remote,
                                      const std::vector<RegionInfo>& local_regions,
                                      const std::vector<RegionInfo>& remote_regions);

}  // namespace tandem::transfer
