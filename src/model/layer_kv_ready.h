// Layer-wise KV readiness, for sending a prompt's KV while the rest of the model still computes
// (issue 7: layer-wise pipelining of disaggregated prefill, as NIXL/Dynamo and Mooncake do).
//
// A ModelRunner given ForwardBatch::on_layer_kv_written calls it once per layer, in layer order,
// after it has issued that layer's KV cache writes for the whole batch. On the CPU the writes are
// done when the call is made; on a GPU they are queued on the runner's stream and `is_ready` tells
// (a CUDA event query) when they have landed in device memory. `is_ready` is cheap, never blocks,
// may be called from any thread, and stays valid until the next step of the same runner; once it
// returns true it keeps doing so (a later step may re-record the event, which only completes
// later, never earlier, so a caller still sees a conservative answer).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

namespace tandem {

struct LayerKVReady {
  int layer = 0;                      // 0-based, in [0, num_layers)
  std::function<bool()> is_ready;     // true once layer `layer`'s KV of this step is in memory
  std::span<const int> block_ids;     // engine level: the request's block table (engine.h)
};

}  // namespace tandem
