// Helpers for cuda_op_check: device buffers, random fills, bf16 conversions, error norms, timing and
// the results table. Host code only (no fmt in .cu files; see src/kernels/cuda/cuda_check.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::opcheck {

// A CUDA error or a Status error from an op aborts the whole check (exit 2): after a device fault
// every later number would be meaningless.
#define OC_CUDA(expr)                                                                   \
  do {                                                                                  \
    cudaError_t _e = (expr);                                                            \
    if (_e != cudaSuccess) {                                                            \
      std::fprintf(stderr, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #expr,          \
                   cudaGetErrorString(_e));                                             \
      std::exit(2);                                                                     \
    }                                                                                   \
  } while (0)
#define OC_OK(expr)                                                                     \
  do {                                                                                  \
    ::tandem::Status _s = (expr);                                                       \
    if (!_s.ok()) {                                                                     \
      std::fprintf(stderr, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #expr,          \
                   _s.ToString().c_str());                                              \
      std::exit(2);                                                                     \
    }                                                                                   \
  } while (0)

// Owned device memory of n elements of T.
template <typename T>
class DevBuf {
 public:
  DevBuf() = default;
  explicit DevBuf(size_t n) : n_(n) { OC_CUDA(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T))); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; o.n_ = 0; }
  DevBuf& operator=(DevBuf&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~DevBuf() { if (p_ != nullptr) cudaFree(p_); }
  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  void Poison() { OC_CUDA(cudaMemset(p_, 0xff, bytes())); }  // bf16/fp32 NaN, int -1
  void Upload(const std::vector<T>& v) {
    OC_CUDA(cudaMemcpy(p_, v.data(), std::min(v.size(), n_) * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> Download() const {
    std::vector<T> v(n_);
    OC_CUDA(cudaMemcpy(v.data(), p_, bytes(), cudaMemcpyDeviceToHost));
    return v;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

using bf16 = __nv_bfloat16;

// Device-side uniform fills in [lo, hi) from a counter hash (op_check_fill.cu); deterministic in seed.
void FillUniform(bf16* p, size_t n, uint64_t seed, float lo, float hi);
void FillUniform(float* p, size_t n, uint64_t seed, float lo, float hi);
// Fresh seed for each input: a base seed (printed at start) plus a counter.
uint64_t NextSeed();
void SetBaseSeed(uint64_t seed);

inline float Bf16ToFloat(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// bf16 device data -> fp32 host vector (the references run on exactly the kernel's inputs).
std::vector<float> ToFloat(const std::vector<bf16>& v);
std::vector<float> DownloadFloat(const DevBuf<bf16>& b);
std::vector<float> DownloadFloat(const bf16* p, size_t n);
// Round fp32 to bf16 (round to nearest even) and upload.
void UploadBf16(bf16* dst, const std::vector<float>& v);

struct ErrorStats {
  double rel = 0;       // ||out - ref||_2 / ||ref||_2
  double max_abs = 0;   // max |out - ref|
  long non_finite = 0;  // NaN/Inf in out (unwritten outputs stay NaN from the poison)
};
ErrorStats Compare(const float* out, const float* ref, size_t n);
inline ErrorStats Compare(const std::vector<float>& out, const std::vector<float>& ref) {
  return Compare(out.data(), ref.data(), std::min(out.size(), ref.size()));
}

// True with --small or OPCHECK_NO_TIMING set (under a profiler): TimeUs / TimeUsGraph return -1.
bool TimingOff();
// Median time of one call of fn in microseconds (CUDA events around batches of calls, after a
// warm-up). fn only enqueues work on the default stream.
double TimeUs(const std::function<void()>& fn, int reps_per_sample = 10, int samples = 15);
// The same, with the reps_per_sample calls of `fn` captured once into a CUDA graph on a stream of
// its own and the graph launched per sample, as the engine's decode graphs run a kernel: no host
// launch cost between the kernels (TimeUs of a kernel of a few us measures the host's enqueue).
// -1 when --small or the capture fails.
double TimeUsGraph(const std::function<void(cudaStream_t)>& fn, int reps_per_sample = 10,
                   int samples = 15);

// A kernel timed over copies of its input reads it from HBM as in a real step, not from the 50 MB
// L2 that a small input would stay in: L2Copies says how many (>= 256 MB in all, at most
// max_copies), CopiesOf makes copies 1.. of them (copy 0 is `buf` itself).
inline int L2Copies(size_t bytes, int max_copies) {
  return static_cast<int>(std::min<size_t>(max_copies, (size_t{256} << 20) / std::max<size_t>(bytes, 1) + 1));
}
template <typename T>
std::vector<DevBuf<T>> CopiesOf(const DevBuf<T>& buf, int copies) {
  std::vector<DevBuf<T>> out;
  for (int c = 1; c < copies; ++c) {
    out.emplace_back(buf.size());
    OC_CUDA(cudaMemcpy(out.back().get(), buf.get(), buf.bytes(), cudaMemcpyDeviceToDevice));
  }
  return out;
}

// The measured ceilings of DESIGN.md section 5 (one H200, CUDA 13.0).
constexpr double kCeilingGBs = 4270.0;
constexpr double kCeilingTflops = 796.0;

struct Row {
  Row(std::string op_name, std::string shape_text) : op(std::move(op_name)), shape(std::move(shape_text)) {}
  std::string op;
  std::string shape;
  ErrorStats err;
  double tol = 0;
  bool pass = false;
  std::string note;      // what failed, or extra facts
  double time_us = -1;   // < 0: not timed
  double bytes = 0;      // bytes moved (for GB/s) or 0
  double flops = 0;      // FLOPs (for TFLOP/s) or 0
};

// --small: only the small and odd shapes, no timing (for compute-sanitizer runs).
bool Small();
void SetSmall(bool small);

// Records a result (prints it at once as well); the table is printed at the end.
void Record(Row row);
// Prints the table, returns the number of failed rows.
int PrintTable();

}  // namespace tandem::opcheck

namespace tandem::opcheck {
// The checks, one file per group of ops (each records rows).
void CheckEmbedding();
void CheckRmsNorm();
void CheckQkNormRope();
void CheckSiluMul();
void CheckReshapeAndCache();
void CheckPagedPrefill();
void CheckWgmmaProbe();  // op_check_wgmma.cc, in the prefill group (Hopper builds only)
void CheckPagedDecode();
void CheckLinear();
void CheckFp8();  // op_check_fp8.cc
void CheckFp8SiluQuant();  // op_check_fp8_silu.cc, in the fp8 group
void CheckKvFp8();  // op_check_kv_fp8.cc
void CheckSampling();
void CheckKvBlockCopy();  // op_check_kv_copy.cc
void CheckTokenBitmask();  // op_check_bitmask.cc, in the sampling group
}  // namespace tandem::opcheck
