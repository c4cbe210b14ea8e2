#include "engine/kv_offload_setup.h"

#include <cstdlib>
#include <string>

#include "common/logging.h"

namespace tandem {

std::unique_ptr<kvtier::KvOffloader> MakeKvOffloader(const EngineConfig& config, ModelRunner& runner) {
  if (config.kv_offload_host_bytes == 0) return nullptr;
  if (!config.enable_prefix_caching) {
    log::warn("kv offload: off (it keeps prefix-cache blocks; prefix caching is off)");
    return nullptr;
  }
  const KVCacheLayout layout = runner.kv_cache_layout();
  const size_t slot = layout.block_bytes * layout.layer_base.size();
  if (slot == 0 || config.kv_offload_host_bytes < slot) {
    log::warn("kv offload: off ({} bytes hold no block of {} bytes)", config.kv_offload_host_bytes, slot);
    return nullptr;
  }
  kvtier::PoolCopier copier;
  ModelRunner* r = &runner;
  copier.copy = [r](std::span<const KvBlockCopy> copies) { return r->CopyKvBlocks(copies); };
  copier.sync = [r] { return r->SyncKvCopies(); };
  copier.async = layout.device_id >= 0;
  // TANDEM_KV_OFFLOAD_TIME_ONBOARD=1: onboard seconds are the copies' transfer time (the step waits).
  const char* timed = std::getenv("TANDEM_KV_OFFLOAD_TIME_ONBOARD");
  copier.time_onboard = timed != nullptr && std::string(timed) == "1";
  copier.alloc = [r](size_t bytes) { return r->AllocateHostStaging(bytes); };
  copier.free = [r](void* p) { r->FreeHostStaging(p); };
  auto offloader = std::make_unique<kvtier::KvOffloader>(std::move(copier), slot, config.kv_offload_host_bytes);
  if (offloader->host().capacity_blocks() == 0) {
    log::warn("kv offload: off (could not allocate {} bytes of host memory)", config.kv_offload_host_bytes);
    return nullptr;
  }
  log::info("kv offload: host tier of {} blocks ({:.1f} MiB{}, {} bytes a block)",
            offloader->host().capacity_blocks(),
            static_cast<double>(offloader->host().capacity_blocks()) * slot / (1 << 20),
            layout.device_id >= 0 ? ", page-locked" : "", slot);
  return offloader;
}

void AddOffloadStats(const kvtier::KvOffloader& offloader, EngineStats* s) {
  const kvtier::OffloadStats o = offloader.stats();
  s->kv_offload_host_blocks = o.host.blocks;
  s->kv_offload_host_capacity_blocks = o.host.capacity_blocks;
  s->kv_offloaded_blocks = o.offloaded_blocks;
  s->kv_onboarded_blocks = o.onboarded_blocks;
  s->kv_offloaded_bytes = o.offloaded_bytes;
  s->kv_onboarded_bytes = o.onboarded_bytes;
  s->kv_offload_seconds = o.offload_seconds;
  s->kv_onboard_seconds = o.onboard_seconds;
}

}  // namespace tandem
