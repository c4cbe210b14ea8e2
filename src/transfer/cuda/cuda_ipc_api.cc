#include "transfer/cuda/cuda_ipc_api.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "transfer/cuda/cuda_copier.h"
#include "transfer/cuda/sm_copy.h"
#include "transfer/cuda_ipc_backend.h"
#include "transfer/backend.h"
#include "transfer/metadata.h"

namespace tandem::transfer {

namespace {

Status CudaError(cudaError_t e, const char* what) {
  return Err(StatusCode::kInternal, "{}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

// The handle bytes.
struct WireHandle {
  char magic[4] = {'C', 'I', 'P', 'H'};
  int32_t device = 0;
  uint64_t base = 0;
  uint64_t size = 0;
  char process[64] = {};  // ThisProcessId() of the exporter
  cudaIpcMemHandle_t handle{};
};

using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

// A queue's spent events, for reuse: creating one costs a driver call per transfer. Shared by the
// queue and its events (an event may end after its queue); destroys what it holds last.
class EventPool {
 public:
  ~EventPool() {
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }
  cudaEvent_t Take() {
    std::lock_guard lock(mu_);
    if (free_.empty()) return nullptr;
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  void Give(cudaEvent_t e) {
    std::lock_guard lock(mu_);
    free_.push_back(e);
  }

 private:
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
};

class CudaEvent final : public IpcEvent {
 public:
  CudaEvent(int32_t device, cudaEvent_t e, std::shared_ptr<EventPool> pool)
      : device_(device), event_(e), pool_(std::move(pool)) {}
  // Back to the pool once it completed (a later Record reuses it); destroyed otherwise.
  ~CudaEvent() override {
    if (cudaEventQuery(event_) == cudaSuccess) {
      pool_->Give(event_);
    } else {
      (void)cudaGetLastError();
      cudaEventDestroy(event_);
    }
  }
  Result<bool> Query() override {
    cudaError_t e = cudaEventQuery(event_);
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    return CudaError(e, "a cuda_ipc copy failed (cudaEventQuery)");
  }

 private:
  const int32_t device_;
  cudaEvent_t event_;
  const std::shared_ptr<EventPool> pool_;
};

// Pieces from which copies within one GPU go as one cudaMemcpyBatchAsync instead of one
// cudaMemcpyAsync each (TANDEM_CUDA_IPC_BATCH_MIN, default 64, read once). Copies to or from
// another GPU always go batched. Measured, Qwen3-8B KV of 1800 tokens (36 pieces of 7.4 MB over
// the backend's two streams): cuda:0 -> cuda:0 0.39 ms plain vs 0.50 ms batched (H200, session 4);
// cuda:0 -> cuda:1 over NVLink 1.11 ms plain vs 0.96 ms batched (2 x H200, NV18, 2026-12-01).
size_t SameDeviceBatchMin() {
  static const size_t n = [] {
    const char* v = std::getenv("TANDEM_CUDA_IPC_BATCH_MIN");
    return v != nullptr ? static_cast<size_t>(std::max(1, std::atoi(v))) : size_t{64};
  }();
  return n;
}

class CudaQueue final : public IpcQueue {
 public:
  CudaQueue(int32_t device, cudaStream_t s) : device_(device), stream_(s) {}
  ~CudaQueue() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  int32_t device_id() const override { return device_; }
  Status Copy(uint64_t dst, uint64_t src, uint64_t len) override {
    cudaSetDevice(device_);  // this thread may have used another device last
    cudaError_t e = cudaMemcpyAsync(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), len,
                                    cudaMemcpyDefault, stream_);
    return e == cudaSuccess ? Status::Ok() : CudaError(e, "cudaMemcpyAsync (cuda_ipc)");
  }
  Status CopyBatch(const std::vector<CopyOp>& ops, const BatchOptions& options) override {
    if (options.sm_ctas > 0) return SmBatch(ops, options);
    return CeBatch(ops, options);
  }
  Result<std::unique_ptr<IpcEvent>> Record() override {
    cudaSetDevice(device_);
    cudaEvent_t ev = events_->Take();
    if (ev == nullptr) {
      const cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
      if (e != cudaSuccess) return CudaError(e, "cudaEventCreateWithFlags");
    }
    const cudaError_t e = cudaEventRecord(ev, stream_);
    if (e != cudaSuccess) {
      cudaEventDestroy(ev);
      return CudaError(e, "cudaEventRecord");
    }
    return std::unique_ptr<IpcEvent>(std::make_unique<CudaEvent>(device_, ev, events_));
  }

 private:
  // The copy engines.
  Status CeBatch(const std::vector<CopyOp>& ops, const BatchOptions& options) {
    // Within one GPU a few large pieces go faster as plain copies; many small ones need the
    // batch, which costs one driver call (a 2k-token prompt's scattered block table, 4608 x 64
    // KiB: 0.6-0.75 ms in the server on the H200). Between GPUs the batch is faster either way
    // (SameDeviceBatchMin's numbers).
    if (!options.between_devices && ops.size() < SameDeviceBatchMin()) return IpcQueue::CopyBatch(ops, options);
    cudaSetDevice(device_);
    dsts_.clear();
    srcs_.clear();
    sizes_.clear();
    for (const CopyOp& op : ops) {
      dsts_.push_back(reinterpret_cast<void*>(op.dst));
      srcs_.push_back(reinterpret_cast<const void*>(op.src));
      sizes_.push_back(op.len);
    }
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;  // after what the stream did before
    size_t attr_index = 0;
    cudaError_t e = cudaMemcpyBatchAsync(dsts_.data(), srcs_.data(), sizes_.data(), ops.size(), &attr,
                                         &attr_index, 1, stream_);
    if (e == cudaErrorNotSupported || e == cudaErrorInvalidValue) {
      (void)cudaGetLastError();  // e.g. an older driver: one call per piece
      return IpcQueue::CopyBatch(ops, options);
    }
    return e == cudaSuccess ? Status::Ok() : CudaError(e, "cudaMemcpyBatchAsync (cuda_ipc)");
  }

  // One copy kernel for the 16-byte aligned ranges; the copy engines for any others.
  Status SmBatch(const std::vector<CopyOp>& ops, const BatchOptions& options) {
    cudaSetDevice(device_);
    ranges_.clear();
    std::vector<CopyOp> rest;
    for (const CopyOp& op : ops) {
      const cuda::SmCopyRange r{op.dst, op.src, op.len};
      if (cuda::SmCopyAligned(r)) {
        ranges_.push_back(r);
      } else {
        rest.push_back(op);
      }
    }
    const cudaError_t e = cuda::LaunchSmCopy(ranges_.data(), static_cast<int>(ranges_.size()), options.sm_ctas, stream_);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return CudaError(e, "the cuda_ipc copy kernel (LaunchSmCopy)");
    }
    return rest.empty() ? Status::Ok() : CeBatch(rest, options);
  }

  const int32_t device_;
  cudaStream_t stream_;
  const std::shared_ptr<EventPool> events_ = std::make_shared<EventPool>();
  std::vector<cuda::SmCopyRange> ranges_;  // SmBatch's, reused
  std::vector<void*> dsts_;  // CopyBatch's arrays, reused
  std::vector<const void*> srcs_;
  std::vector<size_t> sizes_;
};

class CudaIpcApi final : public IpcMemoryApi {
 public:
  std::string name() const override { return "cuda"; }

  Result<IpcExport> Export(uint64_t addr, uint64_t len, int32_t device) override {
    cudaPointerAttributes attr{};
    cudaError_t e = cudaPointerGetAttributes(&attr, reinterpret_cast<const void*>(addr));
    if (e != cudaSuccess || attr.type != cudaMemoryTypeDevice) {
      (void)cudaGetLastError();
      return Err(StatusCode::kInvalidArgument, "{:#x} is not device memory", addr);
    }
    if (attr.device != device) {
      return Err(StatusCode::kInvalidArgument, "{:#x} is memory of cuda:{}, not cuda:{}", addr, attr.device, device);
    }
    TANDEM_ASSIGN_OR_RETURN(GetAddressRange range, RangeFn());
    // The driver call looks the pointer up in the current context: make it the device's own (a
    // process with two GPUs may have the other one current; the caller's device is restored).
    int previous = -1;
    (void)cudaGetDevice(&previous);
    e = cudaSetDevice(device);
    if (e != cudaSuccess) return CudaError(e, "cudaSetDevice");
    struct Restore {
      int device;
      ~Restore() {
        if (device >= 0) (void)cudaSetDevice(device);
      }
    } restore{previous};
    CUdeviceptr base = 0;
    size_t size = 0;
    if (range(&base, &size, static_cast<CUdeviceptr>(addr)) != CUDA_SUCCESS) {
      return Err(StatusCode::kInvalidArgument, "cuMemGetAddressRange({:#x}) on cuda:{} failed", addr,
                 device);
    }
    if (addr + len > base + size) {
      return Err(StatusCode::kInvalidArgument, "[{:#x}, +{}) spans more than one allocation", addr, len);
    }
    WireHandle w;
    w.device = device;
    w.base = base;
    w.size = size;
    const std::string me = ThisProcessId();
    std::memcpy(w.process, me.data(), std::min(me.size(), sizeof(w.process) - 1));
    e = cudaIpcGetMemHandle(&w.handle, reinterpret_cast<void*>(base));
    if (e != cudaSuccess) return CudaError(e, "cudaIpcGetMemHandle");
    return IpcExport{std::string(reinterpret_cast<const char*>(&w), sizeof(w)), addr - base};
  }

  Result<uint64_t> Open(const std::string& handle, int32_t local_device) override {
    WireHandle w;
    if (handle.size() != sizeof(w)) return Err(StatusCode::kInvalidArgument, "not a CUDA IPC handle");
    std::memcpy(&w, handle.data(), sizeof(w));
    if (std::memcmp(w.magic, "CIPH", 4) != 0) return Err(StatusCode::kInvalidArgument, "not a CUDA IPC handle");
    cudaError_t e = cudaSetDevice(local_device);
    if (e != cudaSuccess) return CudaError(e, "cudaSetDevice");
    if (ThisProcessId() == w.process) {
      // Our own allocation (CUDA opens no handle in its exporting process): the pointer itself.
      if (w.device != local_device) {
        e = cudaDeviceEnablePeerAccess(w.device, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
          (void)cudaGetLastError();  // without peer access the copies still work, through host memory
        }
        (void)cudaGetLastError();
      }
      return w.base;
    }
    void* p = nullptr;
    e = cudaIpcOpenMemHandle(&p, w.handle, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return CudaError(e, "cudaIpcOpenMemHandle");
    }
    std::lock_guard lock(mu_);
    opened_.insert({reinterpret_cast<uint64_t>(p), local_device});
    return reinterpret_cast<uint64_t>(p);
  }

  void Close(uint64_t base, int32_t local_device) override {
    {
      std::lock_guard lock(mu_);
      if (!opened_.erase({base, local_device})) return;  // our own memory: nothing was opened
    }
    cudaSetDevice(local_device);
    cudaIpcCloseMemHandle(reinterpret_cast<void*>(base));
  }

  Result<std::unique_ptr<IpcQueue>> NewQueue(int32_t device) override {
    const int count = CudaDeviceCount();
    if (device < 0 || device >= count) {
      return Err(StatusCode::kInvalidArgument, "no CUDA device {} ({} device(s) visible)", device, count);
    }
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) return CudaError(e, "cudaSetDevice");
    cudaStream_t s = nullptr;
    e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) return CudaError(e, "cudaStreamCreateWithFlags");
    return std::unique_ptr<IpcQueue>(std::make_unique<CudaQueue>(device, s));
  }

 private:
  static Result<GetAddressRange> RangeFn() {
    static GetAddressRange fn = [] {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult q{};
      if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
          q != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        p = nullptr;
      }
      return reinterpret_cast<GetAddressRange>(p);
    }();
    if (!fn) return Err(StatusCode::kInternal, "the CUDA driver offers no cuMemGetAddressRange");
    return fn;
  }

  std::mutex mu_;
  std::set<std::pair<uint64_t, int32_t>> opened_;
};

}  // namespace

std::shared_ptr<IpcMemoryApi> MakeCudaIpcApi() { return std::make_shared<CudaIpcApi>(); }

void RegisterCudaIpcBackend() {
  static std::once_flag once;
  std::call_once(once, [] { RegisterBackendFactory("cuda_ipc", MakeCudaIpcBackendFactory(MakeCudaIpcApi())); });
}

}  // namespace tandem::transfer
