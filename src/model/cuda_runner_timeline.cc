// The CUDA runner's kernel-group timing for StepTimeline::device_groups (cuda_runner_impl.h):
// one CUDA event per group boundary, elapsed times read after the step's synchronize.
#ifdef TANDEM_HAVE_CUDA

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "model/cuda_runner_impl.h"

namespace tandem {

Status CudaModelRunner::MarkGroup(const char* group) {
  if (!timing_groups()) return Status::Ok();
  const size_t i = timeline_marks_.size();
  if (i == timeline_events_.size()) {
    cudaEvent_t ev = nullptr;
    TANDEM_CUDA_RETURN_IF_ERROR(cudaEventCreate(&ev));
    timeline_events_.push_back(ev);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(cudaEventRecord(timeline_events_[i], stream_));
  timeline_marks_.push_back(group);
  return Status::Ok();
}

Status CudaModelRunner::CollectGroups() {
  if (!timing_groups()) {
    timeline_marks_.clear();
    return Status::Ok();
  }
  for (size_t i = 1; i < timeline_marks_.size(); ++i) {
    float ms = 0.0f;
    TANDEM_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, timeline_events_[i - 1], timeline_events_[i]));
    timeline_->AddDevice(timeline_marks_[i], ms);
  }
  timeline_marks_.clear();
  return Status::Ok();
}

}  // namespace tandem

#endif  // TANDEM_HAVE_CUDA
