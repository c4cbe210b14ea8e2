// The engine's KV offloader (kvtier/offloader.h) for its runner's KV pool, from EngineConfig.
#pragma once

#include <memory>

#include "engine/engine.h"
#include "kvtier/offloader.h"
#include "model/model_runner.h"

namespace tandem {

// Copies through runner.CopyKvBlocks (asynchronous for a device pool), the tier's memory from
// runner.AllocateHostStaging. Null (with a log line saying why) when config.kv_offload_host_bytes
// is 0, prefix caching is off, or the tier would hold no block. `runner` outlives the offloader.
std::unique_ptr<kvtier::KvOffloader> MakeKvOffloader(const EngineConfig& config, ModelRunner& runner);

// The offloader's numbers into the engine's stats (EngineStats::kv_offload_*).
void AddOffloadStats(const kvtier::KvOffloader& offloader, EngineStats* s);

}  // namespace tandem
