// The device-memory transfer suite (device_memory_test.cc) on GPU memory: cudaMalloc'd buffers,
// the agents' copies through MakeCudaCopier and, for cuda_ipc, MakeCudaIpcApi. Two GPUs: the
// sides on devices 0 and 1 (local copies peer to peer); one GPU: both on device 0. No GPU: the
// suite skips.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "../device_env.h"
#include "transfer/cuda/cuda_copier.h"
#include "transfer/cuda/cuda_ipc_api.h"

namespace tandem::transfer::testing {
namespace {

void Check(cudaError_t e, const char* what) { ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e); }

class CudaDeviceEnv final : public DeviceEnv {
 public:
  explicit CudaDeviceEnv(int count) : count_(count), copier_(MakeCudaCopier()) {}
  std::string name() const override { return "cuda"; }
  std::shared_ptr<DeviceCopier> copier() override { return copier_; }
  // One process: the cuda_ipc backend uses the peer's pointers (CUDA opens no own handles).
  std::shared_ptr<IpcMemoryApi> ipc() override { return ipc_; }
  int32_t first_device() const override { return 0; }
  int32_t second_device() const override { return count_ > 1 ? 1 : 0; }
  DeviceBuffer Alloc(int32_t device, uint64_t bytes) override {
    void* p = nullptr;
    cudaSetDevice(device);
    cudaError_t e = cudaMalloc(&p, bytes);
    EXPECT_EQ(e, cudaSuccess) << "cudaMalloc " << bytes << ": " << cudaGetErrorString(e);
    return DeviceBuffer(reinterpret_cast<uint64_t>(p), bytes, device, [p, device] {
      cudaSetDevice(device);
      cudaFree(p);
    });
  }
  void Write(const DeviceBuffer& b, uint64_t offset, const void* src, uint64_t len) override {
    cudaSetDevice(b.device());
    Check(cudaMemcpy(reinterpret_cast<void*>(b.addr() + offset), src, len, cudaMemcpyHostToDevice), "write");
  }
  void Read(const DeviceBuffer& b, uint64_t offset, void* dst, uint64_t len) override {
    cudaSetDevice(b.device());
    Check(cudaMemcpy(dst, reinterpret_cast<const void*>(b.addr() + offset), len, cudaMemcpyDeviceToHost), "read");
  }

 private:
  const int count_;
  std::shared_ptr<DeviceCopier> copier_;
  std::shared_ptr<IpcMemoryApi> ipc_ = MakeCudaIpcApi();
};

}  // namespace

std::unique_ptr<DeviceEnv> MakeDeviceEnv(std::string* why) {
  const int count = CudaDeviceCount();
  if (count == 0) {
    *why = "no CUDA device visible";
    return nullptr;
  }
  return std::make_unique<CudaDeviceEnv>(count);
}

}  // namespace tandem::transfer::testing
