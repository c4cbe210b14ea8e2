// The engine's KV offloader (kvtier/offloader.h) for its runner's KV pool, from EngineConfig.
#pragma once

#include <memory>
#include <string>

#include "engine/engine.h"
#include "kvtier/offloader.h"
#include "model/model_runner.h"

namespace tandem {

// Copies through runner.CopyKvBlocks (asynchronous for a device pool), the tier's memory from
// runner.AllocateHostStaging. Null (with a log line saying why) when config.kv_offload_host_bytes
// is 0, prefix caching is off, or the tier would hold no block. `runner` outlives the offloader.
// With config.kv_offload_disk_bytes and _dir, a disk tier below the host tier, keyed by
// KvTierFingerprint (a file of another fingerprint is discarded).
std::unique_ptr<kvtier::KvOffloader> MakeKvOffloader(const EngineConfig& config, ModelRunner& runner);

// What a disk tier's blocks depend on: kv_offload_model_id, the model's shapes and dtype, the KV
// block size and layout.
std::string KvTierFingerprint(const EngineConfig& config, ModelRunner& runner);

// The offloader's numbers into the engine's stats (EngineStats::kv_offload_*).
void AddOffloadStats(const kvtier::KvOffloader& offloader, EngineStats* s);

}  // namespace tandem
