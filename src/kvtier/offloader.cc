#include "kvtier/offloader.h"

#include <chrono>
#include <cstring>

#include "common/logging.h"

namespace tandem::kvtier {

namespace {
double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

KvOffloader::KvOffloader(PoolRegion pool, size_t host_bytes)
    : pool_(std::move(pool)), host_(pool_.layer_base.size() * pool_.block_bytes, host_bytes) {}

void KvOffloader::BeforeForward(std::span<const EvictedBlock> evicted,
                                std::span<const OnboardBlock> onboard) {
  const size_t bb = pool_.block_bytes;
  if (!evicted.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    for (const EvictedBlock& e : evicted) {
      const std::optional<int> slot = host_.Reserve(e.hash, e.parent_hash);
      if (!slot) {
        if (!host_.Contains(e.hash)) ++counters_.dropped;  // every slot pinned
        continue;
      }
      std::byte* dst = host_.SlotData(*slot);
      for (size_t l = 0; l < pool_.layer_base.size(); ++l) {
        std::memcpy(dst + l * bb, pool_.layer_base[l] + static_cast<size_t>(e.block_id) * bb, bb);
      }
      host_.Commit(*slot);
      ++counters_.offloaded_blocks;
      counters_.offloaded_bytes += host_.slot_bytes();
    }
    counters_.offload_seconds += Since(t0);
  }
  if (!onboard.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    for (const OnboardBlock& o : onboard) {
      const std::optional<int> slot = host_.Find(o.hash);
      if (!slot) {
        ++missing_;
        log::error("kv offload: block {:016x} to onboard into pool block {} is not in the host tier",
                   o.hash, o.block_id);
        continue;
      }
      const std::byte* src = host_.SlotData(*slot);
      for (size_t l = 0; l < pool_.layer_base.size(); ++l) {
        std::memcpy(pool_.layer_base[l] + static_cast<size_t>(o.block_id) * bb, src + l * bb, bb);
      }
      host_.Unpin(o.hash);
      ++counters_.onboarded_blocks;
      counters_.onboarded_bytes += host_.slot_bytes();
    }
    counters_.onboard_seconds += Since(t0);
  }
}

OffloadStats KvOffloader::stats() const {
  OffloadStats s = counters_;
  s.host = host_.stats();
  return s;
}

}  // namespace tandem::kvtier
