#include "transfer/cuda/cuda_copier.h"

#include <cuda_runtime_api.h>

namespace tandem::transfer {

namespace {

Status CudaError(cudaError_t e, const char* what) {
  return Err(StatusCode::kInternal, "{}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

class CudaStream final : public CopyStream {
 public:
  CudaStream(int32_t device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~CudaStream() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  int32_t device_id() const override { return device_; }

  Status ToHost(void* dst, uint64_t src, uint64_t len) override {
    cudaSetDevice(device_);  // this thread may have used another device last
    return Enqueue(cudaMemcpyAsync(dst, reinterpret_cast<const void*>(src), len, cudaMemcpyDeviceToHost, stream_),
                   "cudaMemcpyAsync device to host");
  }
  Status FromHost(uint64_t dst, const void* src, uint64_t len) override {
    cudaSetDevice(device_);  // this thread may have used another device last
    return Enqueue(cudaMemcpyAsync(reinterpret_cast<void*>(dst), src, len, cudaMemcpyHostToDevice, stream_),
                   "cudaMemcpyAsync host to device");
  }
  Status DeviceToDevice(uint64_t dst, int32_t src_device, uint64_t src, uint64_t len) override {
    cudaSetDevice(device_);  // this thread may have used another device last
    if (src_device == device_) {
      return Enqueue(cudaMemcpyAsync(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), len,
                                     cudaMemcpyDeviceToDevice, stream_),
                     "cudaMemcpyAsync device to device");
    }
    return Enqueue(cudaMemcpyPeerAsync(reinterpret_cast<void*>(dst), device_, reinterpret_cast<const void*>(src),
                                       src_device, len, stream_),
                   "cudaMemcpyPeerAsync");
  }
  Status Sync() override {
    cudaSetDevice(device_);
    cudaError_t e = cudaStreamSynchronize(stream_);
    Status st = e == cudaSuccess ? Status::Ok() : CudaError(e, "cudaStreamSynchronize");
    if (st.ok() && !first_error_.ok()) st = first_error_;
    first_error_ = Status::Ok();
    return st;
  }

 private:
  Status Enqueue(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::Ok();
    Status st = CudaError(e, what);
    if (first_error_.ok()) first_error_ = st;
    return st;
  }

  const int32_t device_;
  cudaStream_t stream_;
  Status first_error_;
};

class CudaCopier final : public DeviceCopier {
 public:
  std::string name() const override { return "cuda"; }

  Result<std::unique_ptr<CopyStream>> NewStream(int32_t device_id) override {
    int count = CudaDeviceCount();
    if (device_id < 0 || device_id >= count) {
      return Err(StatusCode::kInvalidArgument, "no CUDA device {} ({} device(s) visible)", device_id, count);
    }
    cudaError_t e = cudaSetDevice(device_id);
    if (e != cudaSuccess) return CudaError(e, "cudaSetDevice");
    cudaStream_t stream = nullptr;
    e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return CudaError(e, "cudaStreamCreateWithFlags");
    return std::unique_ptr<CopyStream>(std::make_unique<CudaStream>(device_id, stream));
  }

  // On the calling thread's current device (the Stager makes its stream first): a worker on
  // cuda:1 creates no context on device 0.
  Result<PinnedBuffer> AllocPinned(uint64_t bytes) override {
    void* p = nullptr;
    cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      return Err(StatusCode::kResourceExhausted, "cudaHostAlloc of {} bytes: {}", bytes, cudaGetErrorString(e));
    }
    return PinnedBuffer(p, bytes, [](void* q) { cudaFreeHost(q); });
  }
};

}  // namespace

std::shared_ptr<DeviceCopier> MakeCudaCopier() { return std::make_shared<CudaCopier>(); }

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

}  // namespace tandem::transfer
