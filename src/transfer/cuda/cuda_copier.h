// The CUDA DeviceCopier (transfer/device_copier.h): copies on a non-blocking stream per device
// (cudaMemcpyAsync, cudaMemcpyPeerAsync across devices), synced by cudaStreamSynchronize;
// staging buffers from cudaHostAlloc (page-locked, portable across threads and devices).
//
// Built only with the CUDA toolkit (CMake: TANDEM_HAVE_CUDA, target tandem_transfer_cuda, which
// defines TANDEM_HAVE_CUDA_COPIER for its users); this header itself needs no CUDA.
//
// Ordering with the engine's own streams: a copy stream does not wait for other streams. The
// sender's KV is read after the engine synced the step that computed it (its output was on the
// host); the receiver's copies are synced before the transfer is acknowledged, so the decode
// engine reads the blocks only after they landed.
#pragma once

#include <memory>

#include "common/status.h"
#include "transfer/device_copier.h"

namespace tandem::transfer {

// Never fails: a missing GPU shows as NewStream's error (InvalidArgument: no such device).
std::shared_ptr<DeviceCopier> MakeCudaCopier();

// The number of CUDA devices (0 without a driver or GPU).
int CudaDeviceCount();

}  // namespace tandem::transfer
