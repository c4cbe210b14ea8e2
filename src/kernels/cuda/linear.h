// Linear layer on the GPU as torch.nn.functional.linear (the CUDA twin of kernels/cpu/matmul.h):
//   y = x W^T (+ bias),  x: [m, k] bf16, W: [n, k] bf16 (HF [out, in]), y: [m, n] bf16 or fp32,
// through cublasGemmEx with fp32 compute (CUBLAS_COMPUTE_32F; bf16 tensor cores on sm_90), or, for
// m <= GemvMaxM() (default 8) when the shapes allow it, through the skinny-GEMM kernel of gemv.h
// (weights read once for all m rows; cuBLAS reaches only 60-78% of the bandwidth at m = 1 on some
// Qwen3-8B shapes). cuBLAS path: with a bias, y is rounded once by the GEMM and once more after
// the bias add (bf16 y only); GEMV path: the bias is added in fp32 and y rounded once.
// Device pointers; asynchronous on `stream`; no allocation or synchronization (graph-capturable).
// A handle with a GemmTuner (gemm_tune.h; CublasHandle::set_tuner) runs the shapes it tuned through
// the cuBLASLt algorithm it measured fastest, when that beat cublasGemmEx.
// Env (read once): TANDEM_GEMV=0 disables the GEMV; TANDEM_GEMV_MAX_M=N (0..16) sets the threshold.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

enum class OutDtype { kBf16, kFloat32 };

struct LinearArgs {
  const __nv_bfloat16* x = nullptr;  // [m, k], row stride ldx (>= k)
  int64_t ldx = 0;
  const __nv_bfloat16* w = nullptr;  // [n, k] contiguous
  const __nv_bfloat16* bias = nullptr;  // [n] or nullptr
  void* y = nullptr;                 // [m, n] of out_dtype, row stride ldy (>= n)
  int64_t ldy = 0;
  OutDtype out_dtype = OutDtype::kBf16;
  int m = 0;
  int n = 0;
  int k = 0;
  // The GEMV path (m <= GemvMaxM) on sm_90+: launch programmatically after the previous kernel
  // in the stream (device_utils.cuh TANDEM_LAUNCH_PDL), which should call TriggerDependents early:
  // W is fetched while it finishes, x read after griddepcontrol.wait. Ignored elsewhere (cuBLAS,
  // older GPUs) and when TANDEM_GEMV_PDL=0.
  bool programmatic_launch = false;
};

namespace detail {
// y[i, j] += bias[j] for the m x n output.
cudaError_t LaunchAddBias(const LinearArgs& args, cudaStream_t stream);
}  // namespace detail
}  // namespace tandem::cuda

#ifndef __CUDACC__
#include "common/status.h"

namespace tandem::cuda {

class GemmTuner;

// An owned cuBLAS handle (one per thread or stream user; not thread-safe).
class CublasHandle {
 public:
  // Errors: Internal (no device, cublasCreate failed).
  static Result<CublasHandle> Create();
  CublasHandle(CublasHandle&& other) noexcept : handle_(other.handle_), tuner_(other.tuner_) {
    other.handle_ = nullptr;
    other.tuner_ = nullptr;
  }
  CublasHandle& operator=(CublasHandle&& other) noexcept;
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  ~CublasHandle();
  cublasHandle_t get() const { return handle_; }
  // Not owned; null: none. Linear asks it first for m > GemvMaxM().
  void set_tuner(const GemmTuner* tuner) { tuner_ = tuner; }
  const GemmTuner* tuner() const { return tuner_; }

 private:
  explicit CublasHandle(cublasHandle_t h) : handle_(h) {}
  cublasHandle_t handle_ = nullptr;
  const GemmTuner* tuner_ = nullptr;
};

// Errors: InvalidArgument (sizes, strides, null pointers), Internal (cuBLAS or CUDA).
Status Linear(const CublasHandle& handle, const LinearArgs& args, cudaStream_t stream);

// The two paths of Linear, for tests and benchmarks. LinearGemv: k_split 0 = automatic (a
// function of n, k and the SM count), else 1, 2, 4 or 8; errors: InvalidArgument (also when
// GemvSupported fails: m > 16, k or ldx not a multiple of 8, x or W not 16-byte aligned).
Status LinearCublas(const CublasHandle& handle, const LinearArgs& args, cudaStream_t stream);
Status LinearGemv(const LinearArgs& args, int k_split, cudaStream_t stream);
// The k_split LinearGemv(args, 0, ...) uses on the current device.
int LinearGemvAutoSplit(const LinearArgs& args);
// Largest m routed to the GEMV by Linear (0 when TANDEM_GEMV=0).
int GemvMaxM();
// Whether LinearArgs::programmatic_launch takes effect: an sm_90+ device and TANDEM_GEMV_PDL not 0.
bool GemvProgrammaticLaunch();

}  // namespace tandem::cuda
#endif
