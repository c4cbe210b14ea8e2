// The CUDA IpcMemoryApi (transfer/ipc_memory.h) for the cuda_ipc backend (transfer/cuda_ipc_backend.h).
//
// Export: the allocation holding the range (cuMemGetAddressRange, reached through
// cudaGetDriverEntryPointByVersion: no link against libcuda) and cudaIpcGetMemHandle of its base;
// the handle bytes are a 64-byte cudaIpcMemHandle_t plus the exporter's process id
// (ThisProcessId), device, base and size. Open: in another process cudaIpcOpenMemHandle with
// cudaIpcMemLazyEnablePeerAccess on the local device (a handle from device 1 opened on device 0
// maps it for device 0's copies over NVLink); in the exporting process itself (CUDA refuses to
// open one's own handles) the base pointer as it is, with peer access enabled between the two
// devices. Copies: cudaMemcpyAsync(cudaMemcpyDefault) on a non-blocking stream of the local
// device; events without timing, polled with cudaEventQuery.
//
// Built only with the CUDA toolkit (target tandem_transfer_cuda); this header needs no CUDA.
#pragma once

#include <memory>

#include "transfer/ipc_memory.h"

namespace tandem::transfer {

std::shared_ptr<IpcMemoryApi> MakeCudaIpcApi();

// Registers the "cuda_ipc" backend factory (RegisterBackendFactory) on MakeCudaIpcApi. Idempotent;
// touches no device (a process without a GPU may call it; the backend's copies then fail).
void RegisterCudaIpcBackend();

}  // namespace tandem::transfer
