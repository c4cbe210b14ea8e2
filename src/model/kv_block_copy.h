// One KV block copied between a model runner's KV pool and host memory (the KV host tier,
// kvtier/offloader.h; ModelRunner::CopyKvBlocks): `host` holds the block's layers one after
// another (num_layers x KVCacheLayout::block_bytes).
#pragma once

#include <cstddef>
#include <span>

#include "common/status.h"

namespace tandem {

struct KvBlockCopy {
  int block_id = 0;
  std::byte* host = nullptr;
  bool to_host = true;  // pool -> host; false: host -> pool
};

// Device time of layer-wise copies (ModelRunner::StartKvCopiesByLayer), seconds, by direction.
struct KvCopySeconds {
  double to_host = 0;  // pool -> host (evicted blocks out)
  double to_pool = 0;  // host -> pool (onboarding)
};

// InvalidArgument for a block id outside [0, num_blocks) or a null host pointer (the first one).
Status CheckKvBlockCopies(std::span<const KvBlockCopy> copies, int num_blocks);

}  // namespace tandem
