// KV blocks between the paged pool (one device array per layer: block b of layer l is the
// block_bytes bytes at layer_base[l] + b * block_bytes) and page-locked host slots that hold a
// block's layers one after another (the KV host tier, kvtier/offloader.h), copied by a kernel
// that reads and writes the host memory directly over the bus (mapped, unified addressing), one
// launch for up to kKvCopyEntriesPerLaunch blocks of every layer. cudaMemcpyAsync per layer and
// block moves a 64 KB piece per call and reached 28% of the pinned host-to-device bandwidth on an
// H200 (dev/kvtier/results/2026-12-02b).
//
// Requirements (KvBlockCopySupported, else the caller copies with cudaMemcpyAsync): the host
// memory device-accessible (cudaMallocHost / cudaHostRegister'ed, unified addressing),
// block_bytes % 16 == 0, every address 16-byte aligned, at most kKvCopyMaxLayers layers.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tandem::cuda {

constexpr int kKvCopyMaxLayers = 128;
constexpr int kKvCopyEntriesPerLaunch = 128;

namespace detail {
// One launch's work, passed by value (under the 4 KB kernel parameter limit).
struct KvCopyLaunch {
  void* layer_base[kKvCopyMaxLayers];
  void* host[kKvCopyEntriesPerLaunch];     // the entry's slot: num_layers x block_bytes
  int32_t block_id[kKvCopyEntriesPerLaunch];
  uint64_t block_bytes = 0;
  int num_layers = 0;
  int num_entries = 0;
  int to_host = 1;  // 1: pool -> host; 0: host -> pool
  int max_ctas = 0;  // 0: a CTA per 16 KB piece; N > 0: at most N CTAs (they stride over the pieces)
};
static_assert(sizeof(KvCopyLaunch) <= 4096, "kernel parameters");
cudaError_t LaunchKvBlockCopy(const KvCopyLaunch& p, cudaStream_t stream);
}  // namespace detail
}  // namespace tandem::cuda

#ifndef __CUDACC__
#include <span>

#include "common/status.h"

namespace tandem::cuda {

struct KvBlockCopyEntry {
  int32_t block_id = 0;
  void* host = nullptr;
  bool to_host = true;
};

// Whether the kernel can do these copies (see the requirements above).
bool KvBlockCopySupported(std::span<void* const> layer_base, size_t block_bytes,
                          std::span<const KvBlockCopyEntry> entries);

// The entries in order (a launch per run of one direction, at most kKvCopyEntriesPerLaunch
// each), asynchronous on `stream`. max_ctas > 0 bounds each launch's grid: a copy on a side
// stream beside the compute then holds at most that many CTAs. Errors: InvalidArgument (KvBlockCopySupported false, a
// negative block id), Internal (CUDA).
Status KvBlockCopy(std::span<void* const> layer_base, size_t block_bytes,
                   std::span<const KvBlockCopyEntry> entries, cudaStream_t stream, int max_ctas = 0);

// The same copies by the copy engines instead of the SMs: one cudaMemcpyBatchAsync (CUDA 13's
// signature) per run of one direction, a block_bytes piece per (entry, layer), flagged
// cudaMemcpyFlagPreferOverlapWithCompute (a copy beside kernels then holds no SMs); checked with
// page-locked host memory (cuda_op_check kv_copy). `stream` must not be the legacy default stream.
// Within a batch the pieces may move in any order; runs of different directions are ordered.
// Every entry is checked before anything is enqueued. Errors: InvalidArgument (no layers, a null
// address, a negative block id, the default stream), Internal (CUDA; the runtime's last error is
// cleared, so that it does not fail the caller's next launch check).
Status KvBlockCopyBatched(std::span<void* const> layer_base, size_t block_bytes,
                          std::span<const KvBlockCopyEntry> entries, cudaStream_t stream);

}  // namespace tandem::cuda
#endif
