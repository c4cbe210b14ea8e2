// The engine's KV offloader (kvtier/offloader.h) for its runner's KV pool, from EngineConfig.
#pragma once

#include <memory>

#include "engine/engine.h"
#include "kvtier/offloader.h"
#include "model/model_runner.h"

namespace tandem {

// Null (with a log line saying why) when config.kv_offload_host_bytes is 0, prefix caching is
// off, the pool is device memory (not supported yet) or the tier would hold no block.
std::unique_ptr<kvtier::KvOffloader> MakeKvOffloader(const EngineConfig& config,
                                                     const KVCacheLayout& layout);

}  // namespace tandem
