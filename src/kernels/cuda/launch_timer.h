// Host-side timing of launches on a stream with CUDA events, for the GEMM tuners (gemm_tune.cc,
// fp8_linear.cc) that measure cuBLASLt's candidate algorithms on the device. Host code only.
#pragma once

#ifndef __CUDACC__

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/cuda/cuda_check.h"

namespace tandem::cuda::detail {

// Times `launch` (a callable returning Status): two untimed calls, then `reps` between events;
// microseconds per call. Synchronizes on `stop`, so the stream must not be capturing. Errors:
// those of `launch`, Internal (CUDA).
template <typename F>
Result<double> TimeLaunchUs(F&& launch, int reps, cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop) {
  for (int i = 0; i < 2; ++i) TANDEM_RETURN_IF_ERROR(launch());
  TANDEM_CUDA_RETURN_IF_ERROR(cudaEventRecord(start, stream));
  for (int i = 0; i < reps; ++i) TANDEM_RETURN_IF_ERROR(launch());
  TANDEM_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop, stream));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
  float ms = 0.0f;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start, stop));
  return 1e3 * ms / reps;
}

// A pair of events, destroyed with the struct (create them with cudaEventCreate).
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() = default;
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  ~EventPair() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
};

}  // namespace tandem::cuda::detail

#endif  // __CUDACC__
