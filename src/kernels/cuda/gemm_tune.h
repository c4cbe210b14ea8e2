// GemmTuner: the fastest GEMM algorithm for shapes that repeat step after step (the projections
// of padded decode batches), measured on the device instead of taken from cuBLAS's heuristic.
//
// For one Linear shape (linear.h: y[m, n] = x[m, k] W[n, k]^T, bf16 in, bf16 or fp32 out, fp32
// compute) Tune times cublasGemmEx with CUBLAS_GEMM_DEFAULT (what Linear runs otherwise) and each
// of cuBLASLt's top kCandidates heuristic algorithms for the same operation (cublasLtMatmul, the
// workspace given at creation as its limit), two untimed and kReps timed launches each on the
// caller's buffers, and keeps the fastest. Given several weight matrices of the shape (the same
// projection of every layer), consecutive launches cycle through them, so that W comes from HBM
// as in a decode step rather than from L2 (the H200's ~60 MB L2 holds a whole qkv or o_proj).
// Run then launches a tuned shape through the kept cuBLASLt algorithm, or answers false when the
// shape was not tuned or cublasGemmEx won (the caller runs LinearCublas). Why: on the H200 cuBLAS's own choice reads the Qwen3-8B qkv weights
// at 65% of the bandwidth at m = 64 and o_proj at 45% at m = 8 (dev/kernels/results/2026-12-01b);
// split-K algorithms among the heuristic's others do better on such skinny shapes (the practice
// of TensorRT-LLM's and vLLM's GEMM autotuning; the API: NVIDIA's cuBLASLt documentation,
// cublasLtMatmulAlgoGetHeuristic).
//
// The key is (m, n, k, ldx, ldy, out dtype, the alignment of x, W and y up to 256 bytes): an
// algorithm is only used on buffers at least as aligned as those it was timed on. Tune overwrites
// a.y, synchronizes the stream and must not run while the stream is being captured (it returns
// OK without tuning then); Run is capturable. Not thread-safe: one tuner per runner (stream).
// Under the CPU emulator (TANDEM_CUDA_EMU) Create answers Unimplemented.
// Env: TANDEM_GEMM_TUNE=0 (read by the CUDA runner) runs without a tuner.
#pragma once

#ifndef __CUDACC__

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <tuple>

#include "common/status.h"
#include "kernels/cuda/linear.h"

namespace tandem::cuda {

class GemmTuner {
 public:
  static constexpr int kCandidates = 16;
  static constexpr int kReps = 8;

  // `workspace` (device memory of `workspace_bytes`, e.g. the one cuBLAS was given) is shared by
  // every tuned launch, stream-ordered. Errors: Internal (cuBLASLt), Unimplemented (emulator).
  static Result<std::unique_ptr<GemmTuner>> Create(void* workspace, size_t workspace_bytes);
  ~GemmTuner();
  GemmTuner(const GemmTuner&) = delete;
  GemmTuner& operator=(const GemmTuner&) = delete;

  // Times the candidates for a's shape (nothing when already tuned or while `stream` captures).
  // Errors: those of Linear's argument checks; Internal (CUDA, cuBLAS).
  // `weights`: optional matrices of a.w's shape and alignment to cycle through (a.w when empty).
  Status Tune(const CublasHandle& handle, const LinearArgs& a, cudaStream_t stream,
              std::span<const __nv_bfloat16* const> weights = {});
  // Whether a's shape was tuned already (Tune would do nothing): a map lookup, no CUDA call.
  bool Tuned(const LinearArgs& a) const { return entries_.count(KeyOf(a)) > 0; }
  // Launches `a` through its shape's tuned cuBLASLt algorithm: true; false (nothing launched) when
  // the shape is not tuned or cublasGemmEx was the fastest. The bias is not added here.
  Result<bool> Run(const LinearArgs& a, cudaStream_t stream) const;

  // What Tune measured for a shape, for benchmarks: microseconds per launch of cublasGemmEx and of
  // the kept algorithm (equal when GemmEx won); false when the shape was not tuned.
  bool Measured(const LinearArgs& a, double* gemmex_us, double* best_us) const;
  size_t num_tuned() const { return entries_.size(); }

 private:
  struct Entry;
  using Key = std::tuple<int, int, int, int64_t, int64_t, int, int>;
  GemmTuner(void* lt, void* workspace, size_t workspace_bytes);
  static Key KeyOf(const LinearArgs& a);

  void* lt_;  // cublasLtHandle_t
  void* workspace_;
  size_t workspace_bytes_;
  std::map<Key, std::unique_ptr<Entry>> entries_;
};

}  // namespace tandem::cuda

#endif  // __CUDACC__
