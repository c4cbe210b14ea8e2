#include "engine/kv_offload_setup.h"

#include "common/logging.h"

namespace tandem {

std::unique_ptr<kvtier::KvOffloader> MakeKvOffloader(const EngineConfig& config,
                                                     const KVCacheLayout& layout) {
  if (config.kv_offload_host_bytes == 0) return nullptr;
  if (!config.enable_prefix_caching) {
    log::warn("kv offload: off (it keeps prefix-cache blocks; prefix caching is off)");
    return nullptr;
  }
  if (layout.device_id >= 0) {
    log::warn("kv offload: off (a KV pool in device memory, CUDA device {}, is not supported yet)",
              layout.device_id);
    return nullptr;
  }
  kvtier::PoolRegion pool;
  pool.block_bytes = layout.block_bytes;
  for (void* base : layout.layer_base) pool.layer_base.push_back(static_cast<std::byte*>(base));
  const size_t slot = pool.block_bytes * pool.layer_base.size();
  if (slot == 0 || config.kv_offload_host_bytes < slot) {
    log::warn("kv offload: off ({} bytes hold no block of {} bytes)", config.kv_offload_host_bytes, slot);
    return nullptr;
  }
  auto offloader = std::make_unique<kvtier::KvOffloader>(std::move(pool), config.kv_offload_host_bytes);
  if (offloader->host().capacity_blocks() == 0) {
    log::warn("kv offload: off (could not allocate {} bytes of host memory)", config.kv_offload_host_bytes);
    return nullptr;
  }
  log::info("kv offload: host tier of {} blocks ({:.1f} MiB, {} bytes a block)",
            offloader->host().capacity_blocks(),
            static_cast<double>(offloader->host().capacity_blocks()) * slot / (1 << 20), slot);
  return offloader;
}

}  // namespace tandem
