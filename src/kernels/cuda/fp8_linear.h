// FP8 E4M3 linear layer on the GPU (issue 28): y = x W^T (+ bias) where W [n, k] (HF [out, in]) is
// stored as e4m3 codes (kernels/cpu/fp8.h for the format) and fp32 scales, W[r][c] = code * scale:
//   Fp8Scaling::kPerChannel  scale [n], one per output row (vLLM / TensorRT-LLM FP8, and what
//                            --quantization fp8 makes at load);
//   Fp8Scaling::kBlock128    one per 128 x 128 block (Hugging Face FineGrainedFP8 `weight_scale_inv`,
//                            DeepSeek-V3, Qwen3-FP8), stored [ceil(n/128), kb4] row-major with kb4 =
//                            Fp8BlockScaleCols(k) = ceil(k/128) rounded up to 4: each block row 16-byte
//                            aligned, the layout cuBLASLt's BLK128x128_32F mode reads (measured on the
//                            H200: unpadded rows give wrong products when ceil(k/128) % 4 != 0).
// x [m, k] bf16 (row stride ldx), y [m, n] bf16 or fp32 (row stride ldy), bias [n] bf16 or null.
//
// Two paths, chosen by Fp8Linear:
//   m <= GemvMaxM() (linear.h; decode): Fp8LinearGemv, weight-only: the codes converted exactly
//     to bf16 in registers and multiplied with x on the tensor cores (the streaming kernel of
//     gemv.h with half the weight bytes); x is not quantized. Scales applied to the fp32 sums (per
//     row at the end, per block after each 64 columns). Any GPU the build runs on (sm_80+).
//   otherwise (prefill, large decode batches): Fp8Gemm, W8A8 through cuBLASLt's FP8 GEMM on
//     sm_90: x quantized to e4m3 on the fly (QuantizeFp8Activations: per token for per-channel
//     weights, per token and 128-column group for block weights, as vLLM / SGLang / DeepSeek-V3
//     do), then cublasLtMatmul with outer-vector scales (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F)
//     or 1 x 128 and 128 x 128 block scales (VEC128_32F / BLK128x128_32F; cuBLAS 12.9+, Hopper), fp32
//     accumulation, y rounded once. Other GPUs: Unimplemented (the runner refuses FP8 at start).
// Numerics: the GEMV is exact products summed in fp32 (as the bf16 GEMV); the GEMM adds the
// activations' rounding to e4m3 (relative error up to 2^-4 per element, ~2^-4 / sqrt(k)-ish on a
// sum of random signs).
// Requirements: k % 16 == 0, n % 16 == 0 (cuBLASLt FP8), ldx % 8 == 0, x, W and y 16-byte aligned.
// With block scales cuBLASLt takes only m % 4 == 0 (measured on the H200, cuBLAS 13.0: m 32, 36,
// 40, 48 run, 37 has no algorithm): Fp8Linear runs the largest multiple of kFp8GemmRowMultiple
// rows through the GEMM and the 1-3 rows left through the GEMV (weight-only numerics for those).
// Device pointers; asynchronous on `stream`; no allocation or synchronization (graph-capturable).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/linear.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/silu_mul.h"

namespace tandem::cuda {

enum class Fp8Scaling { kPerChannel, kBlock128 };

// The widest row RmsNormQuantizeFp8 takes: bf16 staged in 48 KiB of shared memory.
constexpr int kRmsNormQuantizeMaxDim = 24576;

// Floats per block row of kBlock128 scales: ceil(k / 128) rounded up to a multiple of 4.
inline int Fp8BlockScaleCols(int64_t k) { return static_cast<int>(((k + 127) / 128 + 3) / 4 * 4); }

struct Fp8Weight {
  const uint8_t* q = nullptr;    // [n, k] e4m3 codes, row-major
  const float* scale = nullptr;  // see Fp8Scaling
  Fp8Scaling scaling = Fp8Scaling::kPerChannel;
};

struct Fp8LinearArgs {
  const __nv_bfloat16* x = nullptr;  // [m, k], row stride ldx
  int64_t ldx = 0;
  Fp8Weight w;
  const __nv_bfloat16* bias = nullptr;  // [n] or null
  void* y = nullptr;                    // [m, n], row stride ldy
  int64_t ldy = 0;
  OutDtype out_dtype = OutDtype::kBf16;
  int m = 0, n = 0, k = 0;
  bool programmatic_launch = false;  // the GEMV path, as LinearArgs::programmatic_launch
  // The GEMM path only: the scratch already holds x's codes and scales for this m and k (written by
  // SiluMulQuantizeFp8 with the same scratch and scaling), so x is not read and may be null.
  bool x_prequantized = false;
};

// How the GEMM path lays out the scales it hands cuBLASLt (which its documentation fixes; the
// op check measures the candidates on the device, cuda_op_check "fp8_layout" rows).
// The weight's scales are passed as the caller stores them ([nb, kb] row-major, or transposed if
// the measurement says cuBLASLt reads them so).
struct Fp8GemmLayout {
  enum class ActScales {
    kRowMajor,   // [m, kb]
    kKMajor,     // [kb, m]
    kKMajorPad4  // [kb, round_up(m, 4)]
  };
  ActScales act_scales = ActScales::kKMajorPad4;
  // Block weights: cuBLASLt's 128 x 128 block mode, or its 1 x 128 mode with each block's scale
  // repeated over the block's 128 rows (the same products; w.scale then holds [n, kb] or [kb, n]).
  enum class WeightScales { kBlk128x128, kVec128 };
  WeightScales weight_scales = WeightScales::kBlk128x128;
};

}  // namespace tandem::cuda

#ifndef __CUDACC__
#include <map>
#include <memory>
#include <tuple>

#include "common/status.h"

namespace tandem::cuda {

constexpr int kFp8GemmRowMultiple = 4;

// Bytes of the GEMM path's scratch for up to max_m rows of k columns: the e4m3 copy of x and its
// scales (either scaling).
size_t Fp8LinearScratchBytes(int max_m, int max_k);

// Whether the GEMV path takes `a` (m <= 16 and the requirements above); Fp8LinearGemv's k_split:
// 0 automatic, else 1, 2, 4 or 8. Errors: InvalidArgument (shapes, pointers, alignment).
bool Fp8GemvSupported(const Fp8LinearArgs& a);
Status Fp8LinearGemv(const Fp8LinearArgs& a, int k_split, cudaStream_t stream);
int Fp8LinearGemvAutoSplit(const Fp8LinearArgs& a);

// x [m, k] -> codes [m, k] and scales (per token [m], or with group 128 per 128-column group,
// laid out as `layout` says); k % 8 == 0. Errors: InvalidArgument.
Status QuantizeFp8Activations(const __nv_bfloat16* x, int64_t ldx, int m, int k, bool groups_of_128,
                              const Fp8GemmLayout& layout, uint8_t* codes, float* scales,
                              cudaStream_t stream);
// SwiGLU into the FP8 GEMM's activation codes: writes to `scratch` (as Fp8Gemm::Run's, at least
// Fp8LinearScratchBytes(a.num_tokens, a.dim)) the codes and scales that Run would make from
// v = SiluMul(a) (per token, or per 128-column group when groups_of_128; the default
// Fp8GemmLayout), bit for bit, without writing v (a.out is ignored); then run the projection with
// Fp8LinearArgs::x_prequantized. For m > GemvMaxM() and, with block weights, m a multiple of
// kFp8GemmRowMultiple (Fp8Linear sends nothing of such a call to the GEMV, which reads bf16 x).
// Errors: InvalidArgument (dim % 8, strides % 8, alignment, null pointers, scratch too small),
// Internal (CUDA).
Status SiluMulQuantizeFp8(const SiluMulArgs& a, bool groups_of_128, void* scratch, size_t scratch_bytes,
                          cudaStream_t stream);
// RMSNorm into the FP8 GEMM's activation codes, as SiluMulQuantizeFp8 for SwiGLU: writes to
// `scratch` the codes and scales that Run would make from y = RmsNorm(a) (fused: FusedAddRmsNorm,
// whose residual update it makes too; rms_norm.h), bit for bit, without writing y (a.y is
// ignored); then run the projection with Fp8LinearArgs::x_prequantized. Same call conditions as
// SiluMulQuantizeFp8. Errors: InvalidArgument (dim % 8, dim past kRmsNormQuantizeMaxDim, strides
// % 8 or < dim, alignment, null pointers, scratch too small),
// Internal (CUDA).
Status RmsNormQuantizeFp8(const RmsNormArgs& a, bool fused, bool groups_of_128, void* scratch, size_t scratch_bytes,
                          cudaStream_t stream);
// W -> bf16 [n, k] (each code times its scale, rounded once): references, and a bf16 fallback.
Status DequantizeFp8Weight(const Fp8Weight& w, int n, int k, __nv_bfloat16* out, cudaStream_t stream);

// cuBLASLt FP8 GEMMs (sm_90). One per runner (stream user); not thread-safe. The heuristic's first
// algorithm for each shape is looked up once and kept (the lookup is host-only, so Run is
// capturable once a shape was seen; the runner's warm-up steps see every shape).
class Fp8Gemm {
 public:
  // `workspace`: device memory shared stream-ordered with cuBLAS (e.g. the runner's). Errors:
  // Unimplemented (not sm_90, or the emulator), Internal (cuBLASLt).
  // TANDEM_FP8_GEMM=dequant (read here; for checks, not speed): Run dequantizes W to bf16 into a
  // buffer of its own (grown outside graph capture) and runs the bf16 cuBLAS GEMM, so that every
  // row has the GEMV's weight-only numerics (scripts/gpu/peer_check_fp8.py holds tandem to HF's
  // dequantized FP8 that way).
  static Result<std::unique_ptr<Fp8Gemm>> Create(void* workspace, size_t workspace_bytes);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  // `scratch` of at least Fp8LinearScratchBytes(a.m, a.k), 256-byte aligned. Errors:
  // InvalidArgument (requirements), Internal (cuBLASLt found no algorithm or failed).
  Status Run(const Fp8LinearArgs& a, void* scratch, size_t scratch_bytes, cudaStream_t stream,
             const Fp8GemmLayout& layout = {});

 private:
  struct Plan;
  // m, n, k, ldx, ldy, out dtype, block scales, layout, alignment of W / x codes / y.
  using Key = std::tuple<int, int, int, int64_t, int64_t, int, bool, int, int>;
  static constexpr size_t kMaxPlans = 1024;
  Fp8Gemm(void* lt, void* workspace, size_t workspace_bytes);
  Result<const Plan*> PlanFor(const Fp8LinearArgs& a, const void* codes, const Fp8GemmLayout& layout);

  Status RunDequantized(const Fp8LinearArgs& a, cudaStream_t stream);

  void* lt_;  // cublasLtHandle_t
  void* workspace_;
  size_t workspace_bytes_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  bool dequantize_ = false;       // TANDEM_FP8_GEMM=dequant
  std::unique_ptr<CublasHandle> cublas_;  // dequantize_ only
  void* dequant_ = nullptr;       // bf16 W, dequant_bytes_
  size_t dequant_bytes_ = 0;
};

// The dispatch: the GEMV for m <= GemvMaxM() when supported, else gemm->Run (gemm may be null
// only when every call takes the GEMV: InvalidArgument otherwise).
Status Fp8Linear(Fp8Gemm* gemm, const Fp8LinearArgs& a, void* scratch, size_t scratch_bytes,
                 cudaStream_t stream);

}  // namespace tandem::cuda
#endif
