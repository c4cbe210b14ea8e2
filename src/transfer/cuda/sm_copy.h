// A device-to-device copy of many ranges by the SMs of one GPU in one kernel launch (issue 7): the
// cuda_ipc backend's alternative to the copy engines (cudaMemcpyBatchAsync) for KV transfers to a
// peer GPU over NVLink (push: the kernel runs on the source GPU and stores into the peer's mapped
// memory; pull: it runs on the destination and loads) or within one GPU.
//
// Each range is [src, src + len) -> [dst, dst + len), device pointers valid on the stream's
// device (its own memory, or peer memory it can access: an opened CUDA IPC handle, or a device
// with peer access enabled). src, dst and len must be multiples of 16 bytes (SmCopyAligned); the
// ranges must not overlap. The copies of one launch run in any order among themselves and after
// what the stream did before, like any kernel. CUDA only (nvcc and the host compiler both read
// this header); the caller wraps errors.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::transfer::cuda {

struct SmCopyRange {
  uint64_t dst = 0, src = 0, len = 0;
};

// True when the range can go through LaunchSmCopy (16-byte aligned pointers and length).
inline bool SmCopyAligned(const SmCopyRange& r) { return ((r.dst | r.src | r.len) & 15) == 0; }

// Enqueues the copies of ranges[0, n) on `stream` with `ctas` thread blocks of 512 threads
// (several launches when n is above the kernel's 256 ranges per launch; n = 0 enqueues nothing).
// Returns the launch error (cudaErrorInvalidValue for ctas < 1 or an unaligned range).
cudaError_t LaunchSmCopy(const SmCopyRange* ranges, int n, int ctas, cudaStream_t stream);

}  // namespace tandem::transfer::cuda
