#include "engine/kv_offload_setup.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "common/logging.h"
#include "model/config.h"

namespace tandem {

std::string KvTierFingerprint(const EngineConfig& config, ModelRunner& runner) {
  const ModelConfig& m = runner.config();
  const KVCacheLayout layout = runner.kv_cache_layout();
  return fmt::format("model {} | {} {} layers {} hidden {} heads {}/{} head_dim {} vocab {} dtype {} | "
                     "kv block {} tokens, {} bytes a layer",
                     config.kv_offload_model_id, m.architecture, m.model_type, m.num_hidden_layers,
                     m.hidden_size, m.num_attention_heads, m.num_key_value_heads, m.head_dim,
                     m.vocab_size, m.torch_dtype, config.block_size, layout.block_bytes);
}

std::unique_ptr<kvtier::KvOffloader> MakeKvOffloader(const EngineConfig& config, ModelRunner& runner) {
  if (config.kv_offload_host_bytes == 0) {
    if (config.kv_offload_disk_bytes > 0) log::warn("kv offload: no disk tier without a host tier");
    return nullptr;
  }
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
  // How a device runner onboards (TANDEM_KV_ONBOARD): "layer" on a side stream, layer by layer,
  // the step's layer l waiting for layer l only; "land" on a side stream, the requests waiting
  // until their blocks landed while other steps run; "compute" on the compute stream ahead of the
  // step. Unset: the first of layer and land the runner has. A host runner copies at once.
  const char* mode_env = std::getenv("TANDEM_KV_ONBOARD");
  const std::string mode = mode_env != nullptr ? mode_env : "";
  if (!mode.empty() && mode != "layer" && mode != "land" && mode != "compute") {
    log::warn("kv offload: TANDEM_KV_ONBOARD={} is none of layer, land, compute; ignored", mode);
  }
  const bool any = mode != "layer" && mode != "land" && mode != "compute";
  if ((mode == "layer" || any) && runner.LayerwiseKvCopies()) {
    copier.layered = [r](std::span<const KvBlockCopy> c) { return r->StartKvCopiesByLayer(c); };
    copier.layered_seconds = [r] { return r->TakeKvLayerCopySeconds(); };
    // TANDEM_KV_EVICT_LAYERED_MIN=N: a step's evicted blocks go layer-wise with its onboard copies,
    // or alone from N blocks (default kvtier::kLayeredEvictMinBlocks); 0: always ahead of the step.
    if (const char* v = std::getenv("TANDEM_KV_EVICT_LAYERED_MIN"); v != nullptr) {
      copier.layered_evict_min_blocks = static_cast<size_t>(std::max(0, std::atoi(v)));
    }
  } else if ((mode == "land" || any) && runner.AsyncKvOnboard()) {
    copier.onboard_start = [r](std::span<const KvBlockCopy> c, uint64_t* t) { return r->StartKvOnboard(c, t); };
    copier.onboard_poll = [r](uint64_t t, bool wait, bool* landed, double* seconds) {
      return r->PollKvOnboard(t, wait, landed, seconds);
    };
  }
  copier.alloc = [r](size_t bytes) { return r->AllocateHostStaging(bytes); };
  copier.free = [r](void* p) { r->FreeHostStaging(p); };
  kvtier::DiskTierConfig disk;
  if (config.kv_offload_disk_bytes > 0 && !config.kv_offload_disk_dir.empty()) {
    disk.dir = config.kv_offload_disk_dir;
    disk.capacity_bytes = config.kv_offload_disk_bytes;
    disk.fingerprint = KvTierFingerprint(config, runner);
  }
  const bool copier_layered = static_cast<bool>(copier.layered);
  auto offloader = std::make_unique<kvtier::KvOffloader>(std::move(copier), slot, config.kv_offload_host_bytes,
                                                         disk.capacity_bytes > 0 ? &disk : nullptr);
  if (offloader->host().capacity_blocks() == 0) {
    log::warn("kv offload: off (could not allocate {} bytes of host memory)", config.kv_offload_host_bytes);
    return nullptr;
  }
  log::info("kv offload: host tier of {} blocks ({:.1f} MiB{}, {} bytes a block){}",
            offloader->host().capacity_blocks(),
            static_cast<double>(offloader->host().capacity_blocks()) * slot / (1 << 20),
            layout.device_id >= 0 ? ", page-locked" : "", slot,
            offloader->async_onboard()      ? ", onboarding on a side stream (requests wait for it)"
            : copier_layered ? ", onboarding (and evicting) on a side stream, layer by layer" : "");
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
  s->kv_offload_disk_blocks = o.disk.blocks;
  s->kv_offload_disk_capacity_blocks = o.disk.capacity_blocks;
  s->kv_offload_disk_written_blocks = o.disk.written_blocks;
  s->kv_offload_disk_written_bytes = o.disk.written_bytes;
  s->kv_offload_disk_read_blocks = o.disk.read_blocks;
  s->kv_offload_disk_read_bytes = o.disk.read_bytes;
  s->kv_offload_disk_write_seconds = o.disk.write_seconds;
  s->kv_offload_disk_read_seconds = o.disk.read_seconds;
  s->kv_offload_disk_write_errors = o.disk.write_errors;
  s->kv_offload_disk_corrupt = o.disk.corrupt;
  s->kv_offload_fetched_blocks = o.fetched_blocks;
}

}  // namespace tandem
