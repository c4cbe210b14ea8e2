// The CUDA runner's asynchronous KV copies (ModelRunner::StartKvOnboard / PollKvOnboard, and the
// layer-wise StartKvCopiesByLayer; used by the KV host tier, kvtier/offloader.h): copies on a side
// stream, so that a returning request's prefix comes back from pinned host memory (and evicted
// blocks leave for it) while the compute stream computes, instead of ahead of its step.
//
// Order: each start records onboard_ready_ on the compute stream and the side stream waits for it,
// so the copies follow everything enqueued there so far (the step's evicted blocks' copies out of
// the same pool blocks included). StartKvOnboard: the caller keeps the target blocks out of every
// step until the ticket lands (the scheduler holds their requests); a landed ticket's end event is
// also made a dependency of the compute stream. StartKvCopiesByLayer: RunModel's layer l waits for
// layer l's event (FlushOnboardLayers waits for all of them when no step came first).
#ifdef TANDEM_HAVE_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_block_copy.h"
#include "model/cuda_runner_impl.h"

namespace tandem {
namespace {

// The copy kernel's grid on the side stream: TANDEM_KV_ONBOARD_CTAS=N bounds it to N CTAs (they
// stride over the pieces); unbounded by default (a CTA per 16 KB piece, as on the compute stream):
// on an H100 in one run of `tandem run`, 16 CTAs onboarded at 68-73% of a pinned H2D copy beside
// the compute, and cuda_op_check's kv_copy row alone gave 79% (16) and 92% (8, 32, unbounded 89%)
// (dev/kvtier/results/2026-12-07c-h100-onboard-side-stream.txt).
int OnboardCtas() {
  static const int ctas = [] {
    const char* v = std::getenv("TANDEM_KV_ONBOARD_CTAS");
    return v != nullptr ? std::max(0, std::atoi(v)) : 0;
  }();
  return ctas;
}

}  // namespace

Status CudaModelRunner::EnsureOnboardStream() {
  if (onboard_stream_ != nullptr) return Status::Ok();
  // The compute stream's priority: the block scheduler interleaves the two streams' CTAs.
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&onboard_stream_, cudaStreamNonBlocking));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&onboard_ready_, cudaEventDisableTiming));
  return Status::Ok();
}

Status CudaModelRunner::TakeOnboardEvents(cudaEvent_t* start, cudaEvent_t* end) {
  while (onboard_spare_.size() < 2) {
    cudaEvent_t e = nullptr;
    // Blocking sync: an engine with nothing else to do waits for a copy without spinning a core.
    TANDEM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventBlockingSync));
    onboard_spare_.push_back(e);
  }
  *start = onboard_spare_.back();
  onboard_spare_.pop_back();
  *end = onboard_spare_.back();
  onboard_spare_.pop_back();
  return Status::Ok();
}

namespace {
Status CheckOnboard(std::span<const KvBlockCopy> copies, int num_blocks, bool have_pool) {
  if (!have_pool) return Status(StatusCode::kFailedPrecondition, "KV onboarding: no KV pool");
  TANDEM_RETURN_IF_ERROR(CheckKvBlockCopies(copies, num_blocks));
  for (const KvBlockCopy& c : copies) {
    if (c.to_host) return Status(StatusCode::kInvalidArgument, "KV onboarding: a copy to the host");
  }
  return Status::Ok();
}
}  // namespace

void CudaModelRunner::DrainOnboard() {
  if (onboard_stream_ != nullptr) (void)cudaStreamSynchronize(onboard_stream_);
  for (const OnboardFlight& f : onboard_flights_) {
    onboard_spare_.push_back(f.start);
    onboard_spare_.push_back(f.end);
  }
  onboard_flights_.clear();
}

Status CudaModelRunner::StartKvOnboard(std::span<const KvBlockCopy> copies, uint64_t* ticket) {
  TANDEM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_id_));
  TANDEM_RETURN_IF_ERROR(CheckOnboard(copies, num_blocks_, !kv_.empty()));
  TANDEM_RETURN_IF_ERROR(FlushOnboardLayers());
  TANDEM_RETURN_IF_ERROR(EnsureOnboardStream());
  OnboardFlight f;
  TANDEM_RETURN_IF_ERROR(TakeOnboardEvents(&f.start, &f.end));
  auto enqueue = [&]() -> Status {
    TANDEM_CUDA_RETURN_IF_ERROR(cudaEventRecord(onboard_ready_, stream_));
    TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(onboard_stream_, onboard_ready_, 0));
    TANDEM_CUDA_RETURN_IF_ERROR(cudaEventRecord(f.start, onboard_stream_));
    TANDEM_RETURN_IF_ERROR(EnqueueKvCopies(copies, onboard_stream_, OnboardCtas()));
    TANDEM_CUDA_RETURN_IF_ERROR(cudaEventRecord(f.end, onboard_stream_));
    return Status::Ok();
  };
  if (Status st = enqueue(); !st.ok()) {
    // No ticket handed out: what did launch finishes before the caller frees its blocks and slots.
    (void)cudaStreamSynchronize(onboard_stream_);
    onboard_spare_.push_back(f.start);
    onboard_spare_.push_back(f.end);
    return st;
  }
  f.ticket = ++onboard_next_;
  onboard_flights_.push_back(f);
  *ticket = f.ticket;
  return Status::Ok();
}

Status CudaModelRunner::StartKvCopiesByLayer(std::span<const KvBlockCopy> copies) {
  TANDEM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_id_));
  if (kv_.empty()) return Status(StatusCode::kFailedPrecondition, "KV copies by layer: no KV pool");
  TANDEM_RETURN_IF_ERROR(CheckKvBlockCopies(copies, num_blocks_));
  if (copies.empty()) return Status::Ok();
  TANDEM_RETURN_IF_ERROR(FlushOnboardLayers());
  TANDEM_RETURN_IF_ERROR(EnsureOnboardStream());
  const size_t layers = kv_.size();
  auto timing_event = [](cudaEvent_t* e) -> Status {
    TANDEM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(e, cudaEventBlockingSync));
    return Status::Ok();
  };
  if (onboard_layer_start_ == nullptr) TANDEM_RETURN_IF_ERROR(timing_event(&onboard_layer_start_));
  for (std::vector<cudaEvent_t>* v : {&onboard_layer_events_, &onboard_mid_events_}) {
    while (v->size() < layers) {
      cudaEvent_t e = nullptr;
      TANDEM_RETURN_IF_ERROR(timing_event(&e));
      v->push_back(e);
    }
  }
  CollectLayerTimes(/*wait=*/true);  // the last flight's events are recorded again below
  if (Status st = EnqueueByLayer(copies); !st.ok()) {
    // Nothing may run on after the caller gives the blocks and slots back: what launched finishes.
    (void)cudaStreamSynchronize(onboard_stream_);
    return st;
  }
  layered_untimed_ = true;
  onboard_layers_pending_ = true;
  return Status::Ok();
}

Status CudaModelRunner::EnqueueByLayer(std::span<const KvBlockCopy> copies) {
  std::vector<KvBlockCopy> out, in;  // each in the callers' order
  for (const KvBlockCopy& c : copies) (c.to_host ? out : in).push_back(c);
  layered_has_out_ = !out.empty();
  layered_has_in_ = !in.empty();
  TANDEM_CUDA_RETURN_IF_ERROR(cudaEventRecord(onboard_ready_, stream_));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(onboard_stream_, onboard_ready_, 0));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaEventRecord(onboard_layer_start_, onboard_stream_));
  for (size_t l = 0; l < kv_.size(); ++l) {
    // Out first: a block evicted and refilled in the same step leaves before its new bytes come.
    TANDEM_RETURN_IF_ERROR(EnqueueKvCopies(out, onboard_stream_, OnboardCtas(), l, 1));
    TANDEM_CUDA_RETURN_IF_ERROR(cudaEventRecord(onboard_mid_events_[l], onboard_stream_));
    TANDEM_RETURN_IF_ERROR(EnqueueKvCopies(in, onboard_stream_, OnboardCtas(), l, 1));
    TANDEM_CUDA_RETURN_IF_ERROR(cudaEventRecord(onboard_layer_events_[l], onboard_stream_));
  }
  return Status::Ok();
}

void CudaModelRunner::CollectLayerTimes(bool wait) {
  if (!layered_untimed_) return;
  const cudaEvent_t last = onboard_layer_events_[kv_.size() - 1];
  const cudaError_t done = wait ? cudaEventSynchronize(last) : cudaEventQuery(last);
  if (done == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not sticky; cleared
    return;
  }
  layered_untimed_ = false;
  if (done != cudaSuccess) return;  // a device error: the step reports it; no times
  cudaEvent_t prev = onboard_layer_start_;
  for (size_t l = 0; l < kv_.size(); ++l) {
    float out_ms = 0, in_ms = 0;
    if (cudaEventElapsedTime(&out_ms, prev, onboard_mid_events_[l]) != cudaSuccess ||
        cudaEventElapsedTime(&in_ms, onboard_mid_events_[l], onboard_layer_events_[l]) != cudaSuccess) {
      (void)cudaGetLastError();  // no times for this flight; nothing left for the next launch check
      return;
    }
    // A direction without copies counts none (its segment is two records back to back).
    if (layered_has_out_) layered_seconds_.to_host += out_ms / 1e3;
    if (layered_has_in_) layered_seconds_.to_pool += in_ms / 1e3;
    prev = onboard_layer_events_[l];
  }
}

Status CudaModelRunner::FlushOnboardLayers() {
  if (!onboard_layers_pending_) return Status::Ok();
  onboard_layers_pending_ = false;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, onboard_layer_events_[kv_.size() - 1], 0));
  return Status::Ok();
}

KvCopySeconds CudaModelRunner::TakeKvLayerCopySeconds() {
  CollectLayerTimes(/*wait=*/false);
  const KvCopySeconds s = layered_seconds_;
  layered_seconds_ = {};
  return s;
}

Status CudaModelRunner::PollKvOnboard(uint64_t ticket, bool wait, bool* landed, double* seconds) {
  *landed = false;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_id_));
  // On an error every ticket is void (the caller gives all their blocks back): the side stream
  // is drained first, so that no copy still runs into a block or out of a slot given back.
  Status st = PollOne(ticket, wait, landed, seconds);
  if (!st.ok()) DrainOnboard();
  return st;
}

Status CudaModelRunner::PollOne(uint64_t ticket, bool wait, bool* landed, double* seconds) {
  auto it = onboard_flights_.begin();
  while (it != onboard_flights_.end() && it->ticket != ticket) ++it;
  if (it == onboard_flights_.end()) {
    return Err(StatusCode::kInvalidArgument, "PollKvOnboard: no onboarding {} in flight", ticket);
  }
  if (wait) {
    TANDEM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(it->end));
  } else {
    const cudaError_t q = cudaEventQuery(it->end);
    if (q == cudaErrorNotReady) return Status::Ok();
    TANDEM_CUDA_RETURN_IF_ERROR(q);
  }
  float ms = 0;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, it->start, it->end));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, it->end, 0));
  onboard_spare_.push_back(it->start);
  onboard_spare_.push_back(it->end);
  onboard_flights_.erase(it);
  *landed = true;
  *seconds = ms / 1e3;
  return Status::Ok();
}

void CudaModelRunner::DestroyOnboard() {
  if (onboard_stream_ != nullptr) cudaStreamSynchronize(onboard_stream_);
  for (const OnboardFlight& f : onboard_flights_) {
    cudaEventDestroy(f.start);
    cudaEventDestroy(f.end);
  }
  onboard_flights_.clear();
  for (std::vector<cudaEvent_t>* v : {&onboard_layer_events_, &onboard_mid_events_}) {
    for (cudaEvent_t e : *v) cudaEventDestroy(e);
    v->clear();
  }
  if (onboard_layer_start_ != nullptr) cudaEventDestroy(onboard_layer_start_);
  onboard_layer_start_ = nullptr;
  layered_untimed_ = false;
  for (cudaEvent_t e : onboard_spare_) cudaEventDestroy(e);
  onboard_spare_.clear();
  if (onboard_ready_ != nullptr) cudaEventDestroy(onboard_ready_);
  if (onboard_stream_ != nullptr) cudaStreamDestroy(onboard_stream_);
  onboard_ready_ = nullptr;
  onboard_stream_ = nullptr;
}

}  // namespace tandem

#endif  // TANDEM_HAVE_CUDA
