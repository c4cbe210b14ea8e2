// The CUDA runner's kernel-group timing for StepTimeline::device_groups (cuda_runner_impl.h):
// one CUDA event per group boundary, elapsed times read after the step's synchronize.
#ifdef TANDEM_HAVE_CUDA

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "model/cuda_runner_impl.h"

namespace tandem {

Status CudaModelRunner::MarkGroup(const char* group) {
  if (!timing_groups()) return Status::Ok();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream_, &capture));
  std::vector<const char*>& marks =
      capture == cudaStreamCaptureStatusNone ? timeline_marks_ : capture_marks_;
  const size_t i = marks.size();
  if (i == timeline_events_.size()) {
    cudaEvent_t ev = nullptr;
    TANDEM_CUDA_RETURN_IF_ERROR(cudaEventCreate(&ev));
    timeline_events_.push_back(ev);
  }
  // In a capture: an event record node of the graph, recorded at each replay.
  TANDEM_CUDA_RETURN_IF_ERROR(capture == cudaStreamCaptureStatusNone
                                  ? cudaEventRecord(timeline_events_[i], stream_)
                                  : cudaEventRecordWithFlags(timeline_events_[i], stream_,
                                                             cudaEventRecordExternal));
  marks.push_back(group);
  return Status::Ok();
}

Status CudaModelRunner::CollectGroups() {
  if (!timing_groups()) {
    timeline_marks_.clear();
    return Status::Ok();
  }
  for (size_t i = 1; i < timeline_marks_.size(); ++i) {
    float ms = 0.0f;
    const cudaError_t err = cudaEventElapsedTime(&ms, timeline_events_[i - 1], timeline_events_[i]);
    if (err != cudaSuccess) {  // a benchmark's figure, never the step's failure
      cudaGetLastError();
      timeline_->AddDevice("(event timing failed)", 0.0);
      break;
    }
    timeline_->AddDevice(timeline_marks_[i], ms);
  }
  timeline_marks_.clear();
  return Status::Ok();
}

}  // namespace tandem

#endif  // TANDEM_HAVE_CUDA
