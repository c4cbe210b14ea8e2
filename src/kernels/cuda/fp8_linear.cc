// cuda::Fp8Linear (fp8_linear.h): argument checks, the GEMV launch, activation quantization and the
// cuBLASLt FP8 GEMM (API: NVIDIA's cuBLAS documentation, cublasLtMatmul, "FP8 and block scaling").
#include "kernels/cuda/fp8_linear.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#ifndef TANDEM_CUDA_EMU
#include <cublasLt.h>
#endif

#include "kernels/cuda/cublaslt_prefs.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/fp8_linear_kernels.h"
#include "kernels/cuda/gemv.h"

namespace tandem::cuda {
namespace {

bool Aligned16Ptr(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
size_t RoundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }
int KGroups(int k) { return (k + 127) / 128; }
// Where Fp8Gemm::Run's scratch keeps the activation scales: after the codes [m, k], 256-aligned.
size_t ScalesOffset(int m, int k) { return RoundUp(static_cast<size_t>(m) * k, 256); }
// Rows of the k-major activation scales: m rounded up to 4 (16-byte rows of floats).
int64_t ScaleLd(int m) { return (m + 3) / 4 * 4; }

Status CheckArgs(const Fp8LinearArgs& a) {
  if (a.m < 0 || a.n < 0 || a.k < 0) {
    return Err(StatusCode::kInvalidArgument, "Fp8Linear: m {}, n {}, k {}", a.m, a.n, a.k);
  }
  if (a.m == 0 || a.n == 0) return Status::Ok();
  const bool x_read = !a.x_prequantized;
  if ((x_read && a.x == nullptr) || a.w.q == nullptr || a.w.scale == nullptr || a.y == nullptr) {
    return Err(StatusCode::kInvalidArgument, "Fp8Linear: null pointer");
  }
  if ((x_read && a.ldx < a.k) || a.ldy < a.n) {
    return Err(StatusCode::kInvalidArgument, "Fp8Linear: row strides (x {}, y {}) below k {} / n {}",
               a.ldx, a.ldy, a.k, a.n);
  }
  if (a.k % 16 != 0 || (x_read && (a.ldx % 8 != 0 || !Aligned16Ptr(a.x))) || !Aligned16Ptr(a.w.q)) {
    return Err(StatusCode::kInvalidArgument,
               "Fp8Linear: k {} must be a multiple of 16, ldx {} of 8, x and W 16-byte aligned", a.k,
               a.ldx);
  }
  return Status::Ok();
}

}  // namespace

size_t Fp8LinearScratchBytes(int max_m, int max_k) {
  const size_t codes = RoundUp(static_cast<size_t>(std::max(max_m, 0)) * std::max(max_k, 0), 256);
  const size_t scales = static_cast<size_t>(ScaleLd(std::max(max_m, 0))) * KGroups(std::max(max_k, 0)) * 4;
  return codes + RoundUp(std::max<size_t>(scales, static_cast<size_t>(std::max(max_m, 0)) * 4), 256);
}

bool Fp8GemvSupported(const Fp8LinearArgs& a) {
  return !a.x_prequantized && a.m >= 1 && a.m <= kGemvMaxRows && a.n >= 1 && CheckArgs(a).ok();
}

int Fp8LinearGemvAutoSplit(const Fp8LinearArgs& a) {
  return detail::GemvAutoSplit(a.n, a.k, CurrentDeviceLimits().sm_count);
}

Status Fp8LinearGemv(const Fp8LinearArgs& a, int k_split, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckArgs(a));
  if (a.x_prequantized) {
    return Err(StatusCode::kInvalidArgument, "Fp8LinearGemv: reads bf16 x, not prequantized codes");
  }
  if (a.m == 0 || a.n == 0) return Status::Ok();
  if (a.m > kGemvMaxRows) {
    return Err(StatusCode::kInvalidArgument, "Fp8LinearGemv: m {} > {}", a.m, kGemvMaxRows);
  }
  if (k_split == 0) k_split = Fp8LinearGemvAutoSplit(a);
  if (k_split != 1 && k_split != 2 && k_split != 4 && k_split != 8) {
    return Err(StatusCode::kInvalidArgument, "Fp8LinearGemv: k_split {} (0, 1, 2, 4 or 8)", k_split);
  }
  detail::Fp8GemvParams p{};
  p.x = a.x;
  p.ldx = a.ldx;
  p.w = a.w.q;
  p.scale = a.w.scale;
  p.block = a.w.scaling == Fp8Scaling::kBlock128;
  p.bias = a.bias;
  p.y = a.y;
  p.ldy = a.ldy;
  p.m = a.m;
  p.n = a.n;
  p.k = a.k;
  p.k_split = k_split;
  p.pdl = a.programmatic_launch && GemvProgrammaticLaunch();
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchFp8Gemv(p, a.out_dtype == OutDtype::kFloat32, stream));
  return Status::Ok();
}

Status QuantizeFp8Activations(const __nv_bfloat16* x, int64_t ldx, int m, int k, bool groups_of_128,
                              const Fp8GemmLayout& layout, uint8_t* codes, float* scales,
                              cudaStream_t stream) {
  if (m < 0 || k < 0 || k % 8 != 0 || ldx % 8 != 0 || ldx < k || !Aligned16Ptr(x)) {
    return Err(StatusCode::kInvalidArgument,
               "QuantizeFp8Activations: m {}, k {} (multiple of 8), ldx {} (multiple of 8), x 16-byte aligned",
               m, k, ldx);
  }
  using A = Fp8GemmLayout::ActScales;
  const bool k_major = layout.act_scales != A::kRowMajor;
  const int64_t ld = layout.act_scales == A::kKMajorPad4 ? ScaleLd(m) : layout.act_scales == A::kKMajor ? m : KGroups(k);
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchQuantizeFp8Activations(
      x, ldx, m, k, groups_of_128 ? 128 : 0, k_major, ld, codes, scales, stream));
  return Status::Ok();
}

Status SiluMulQuantizeFp8(const SiluMulArgs& a, bool groups_of_128, void* scratch, size_t scratch_bytes,
                          cudaStream_t stream) {
  if (a.num_tokens < 0 || a.dim < 0 || a.dim % 8 != 0 || a.gate_stride % 8 != 0 || a.up_stride % 8 != 0 ||
      a.gate_stride < a.dim || a.up_stride < a.dim || a.gate == nullptr || a.up == nullptr ||
      !Aligned16Ptr(a.gate) || !Aligned16Ptr(a.up)) {
    return Err(StatusCode::kInvalidArgument,
               "SiluMulQuantizeFp8: dim {} and strides {} / {} (multiples of 8, >= dim), gate and up 16-byte aligned",
               a.dim, a.gate_stride, a.up_stride);
  }
  if (scratch == nullptr || scratch_bytes < Fp8LinearScratchBytes(a.num_tokens, a.dim)) {
    return Err(StatusCode::kInvalidArgument, "SiluMulQuantizeFp8: scratch of {} bytes, {} needed", scratch_bytes,
               Fp8LinearScratchBytes(a.num_tokens, a.dim));
  }
  auto* codes = static_cast<uint8_t*>(scratch);
  auto* scales = reinterpret_cast<float*>(static_cast<char*>(scratch) + ScalesOffset(a.num_tokens, a.dim));
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchSiluMulQuantizeFp8(a, groups_of_128 ? 128 : 0, /*scales_k_major=*/true,
                                                               ScaleLd(a.num_tokens), codes, scales, stream));
  return Status::Ok();
}

Status RmsNormQuantizeFp8(const RmsNormArgs& a, bool fused, bool groups_of_128, void* scratch, size_t scratch_bytes,
                          cudaStream_t stream) {
  const bool bad_residual = fused && (a.residual == nullptr || a.res_stride % 8 != 0 || a.res_stride < a.dim ||
                                      !Aligned16Ptr(a.residual));
  if (a.num_rows < 0 || a.dim < 0 || a.dim % 8 != 0 ||
      a.dim > kRmsNormQuantizeMaxDim || a.x_stride % 8 != 0 ||
      a.x_stride < a.dim || a.x == nullptr || a.weight == nullptr || !Aligned16Ptr(a.x) || !Aligned16Ptr(a.weight) ||
      bad_residual) {
    return Err(StatusCode::kInvalidArgument,
               "RmsNormQuantizeFp8: dim {} (a multiple of 8, at most {}), strides {} / {} (multiples of 8, >= dim), "
               "x, residual and weight 16-byte aligned and not null",
               a.dim, kRmsNormQuantizeMaxDim, a.x_stride, a.res_stride);
  }
  if (scratch == nullptr || scratch_bytes < Fp8LinearScratchBytes(a.num_rows, a.dim)) {
    return Err(StatusCode::kInvalidArgument, "RmsNormQuantizeFp8: scratch of {} bytes, {} needed", scratch_bytes,
               Fp8LinearScratchBytes(a.num_rows, a.dim));
  }
  auto* codes = static_cast<uint8_t*>(scratch);
  auto* scales = reinterpret_cast<float*>(static_cast<char*>(scratch) + ScalesOffset(a.num_rows, a.dim));
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchRmsNormQuantizeFp8(a, fused, groups_of_128 ? 128 : 0,
                                                               ScaleLd(a.num_rows), codes, scales, stream));
  return Status::Ok();
}

Status DequantizeFp8Weight(const Fp8Weight& w, int n, int k, __nv_bfloat16* out, cudaStream_t stream) {
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchDequantizeFp8Weight(
      w.q, w.scale, w.scaling == Fp8Scaling::kBlock128, n, k, out, stream));
  return Status::Ok();
}

Status Fp8Linear(Fp8Gemm* gemm, const Fp8LinearArgs& a, void* scratch, size_t scratch_bytes,
                 cudaStream_t stream) {
  if (a.m >= 1 && a.m <= GemvMaxM() && Fp8GemvSupported(a)) return Fp8LinearGemv(a, 0, stream);
  if (gemm == nullptr) {
    return Err(StatusCode::kInvalidArgument, "Fp8Linear: m {} needs the FP8 GEMM, and there is none", a.m);
  }
  const int tail = a.w.scaling == Fp8Scaling::kBlock128 ? a.m % kFp8GemmRowMultiple : 0;
  if (tail == 0) return gemm->Run(a, scratch, scratch_bytes, stream);
  if (a.x_prequantized) {
    return Err(StatusCode::kInvalidArgument, "Fp8Linear: prequantized x with block weights needs m {} to be a "
               "multiple of {}", a.m, kFp8GemmRowMultiple);
  }
  Fp8LinearArgs head = a, rest = a;
  head.m = a.m - tail;
  rest.m = tail;
  rest.x = a.x + static_cast<int64_t>(head.m) * a.ldx;
  rest.y = static_cast<char*>(a.y) + static_cast<int64_t>(head.m) * a.ldy * (a.out_dtype == OutDtype::kBf16 ? 2 : 4);
  rest.programmatic_launch = false;
  if (head.m > 0) TANDEM_RETURN_IF_ERROR(gemm->Run(head, scratch, scratch_bytes, stream));
  return Fp8LinearGemv(rest, 0, stream);
}

#ifdef TANDEM_CUDA_EMU

struct Fp8Gemm::Plan {};
Fp8Gemm::Fp8Gemm(void* lt, void* workspace, size_t workspace_bytes)
    : lt_(lt), workspace_(workspace), workspace_bytes_(workspace_bytes) {}
Result<std::unique_ptr<Fp8Gemm>> Fp8Gemm::Create(void*, size_t) {
  return Status(StatusCode::kUnimplemented, "Fp8Gemm: no cuBLASLt under the CPU emulator");
}
Fp8Gemm::~Fp8Gemm() = default;
Status Fp8Gemm::Run(const Fp8LinearArgs&, void*, size_t, cudaStream_t, const Fp8GemmLayout&) {
  return Status(StatusCode::kUnimplemented, "Fp8Gemm: no cuBLASLt under the CPU emulator");
}

#else

namespace {

Status LtStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Err(StatusCode::kInternal, "cuBLASLt FP8 GEMM: {}: {}", what, cublasGetStatusString(s));
}

// The bf16 Linear's arguments for the same x, bias and y, with W = w (the bias add needs none).
LinearArgs Bf16Args(const Fp8LinearArgs& a, const __nv_bfloat16* w) {
  LinearArgs b;
  b.x = a.x;
  b.ldx = a.ldx;
  b.w = w;
  b.bias = a.bias;
  b.y = a.y;
  b.ldy = a.ldy;
  b.out_dtype = a.out_dtype;
  b.m = a.m;
  b.n = a.n;
  b.k = a.k;
  return b;
}

}  // namespace

struct Fp8Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, x = nullptr, y = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (w) cublasLtMatrixLayoutDestroy(w);
    if (x) cublasLtMatrixLayoutDestroy(x);
    if (y) cublasLtMatrixLayoutDestroy(y);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

Fp8Gemm::Fp8Gemm(void* lt, void* workspace, size_t workspace_bytes)
    : lt_(lt), workspace_(workspace), workspace_bytes_(workspace_bytes) {}

Result<std::unique_ptr<Fp8Gemm>> Fp8Gemm::Create(void* workspace, size_t workspace_bytes) {
  const DeviceLimits& d = CurrentDeviceLimits();
  if (d.cc_major != 9) {
    return Err(StatusCode::kUnimplemented,
               "FP8 GEMMs with channel or block scales need an sm_90 GPU (cuBLASLt's outer-vector and "
               "block scaling are Hopper-only); this one is sm_{}{}", d.cc_major, d.cc_minor);
  }
  cublasLtHandle_t lt = nullptr;
  TANDEM_RETURN_IF_ERROR(LtStatus(cublasLtCreate(&lt), "cublasLtCreate"));
  std::unique_ptr<Fp8Gemm> g(new Fp8Gemm(lt, workspace, workspace_bytes));
  const char* mode = std::getenv("TANDEM_FP8_GEMM");
  g->dequantize_ = mode != nullptr && std::string(mode) == "dequant";
  return g;
}

Fp8Gemm::~Fp8Gemm() {
  plans_.clear();
  if (dequant_ != nullptr) cudaFree(dequant_);
  if (lt_) cublasLtDestroy(static_cast<cublasLtHandle_t>(lt_));
}

Status Fp8Gemm::RunDequantized(const Fp8LinearArgs& a, cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(a.n) * a.k * sizeof(__nv_bfloat16);
  if (bytes > dequant_bytes_) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) {
      return Err(StatusCode::kFailedPrecondition, "Fp8Gemm (TANDEM_FP8_GEMM=dequant): a {} x {} weight first "
                 "seen during graph capture", a.n, a.k);
    }
    TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    if (dequant_ != nullptr) cudaFree(dequant_);
    dequant_ = nullptr;
    dequant_bytes_ = 0;
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMalloc(&dequant_, bytes));
    dequant_bytes_ = bytes;
  }
  if (!cublas_) {
    TANDEM_ASSIGN_OR_RETURN(CublasHandle h, CublasHandle::Create());
    cublas_ = std::make_unique<CublasHandle>(std::move(h));
  }
  auto* w = static_cast<__nv_bfloat16*>(dequant_);
  TANDEM_RETURN_IF_ERROR(DequantizeFp8Weight(a.w, a.n, a.k, w, stream));
  return LinearCublas(*cublas_, Bf16Args(a, w), stream);
}

Result<const Fp8Gemm::Plan*> Fp8Gemm::PlanFor(const Fp8LinearArgs& a, const void* codes,
                                              const Fp8GemmLayout& layout) {
  const bool block = a.w.scaling == Fp8Scaling::kBlock128;
  const Key key(a.m, a.n, a.k, a.ldx, a.ldy, static_cast<int>(a.out_dtype), block,
                static_cast<int>(layout.act_scales) * 4 + static_cast<int>(layout.weight_scales),
                std::min({detail::AlignmentOf(a.w.q), detail::AlignmentOf(codes), detail::AlignmentOf(a.y)}));
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  // One plan per prefill length seen: bounded (a heuristic lookup is tens of microseconds; the
  // decode graphs' batch sizes come back at once).
  if (plans_.size() >= kMaxPlans) plans_.clear();
  auto p = std::make_unique<Plan>();
  TANDEM_RETURN_IF_ERROR(LtStatus(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc"));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  TANDEM_RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa"));
  TANDEM_RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb"));
  // A = W (per output row: cuBLAS's M), B = x (per token: cuBLAS's N).
  const bool vec = layout.weight_scales == Fp8GemmLayout::WeightScales::kVec128;
  const int32_t mode_a = !block ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
                         : vec  ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  const int32_t mode_b = block ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  TANDEM_RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a, sizeof(mode_a)), "A scale mode"));
  TANDEM_RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b, sizeof(mode_b)), "B scale mode"));
  // Placeholder scale pointers for the heuristic (it may check they are set); Run sets the real ones.
  const void* some = workspace_;
  cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &some, sizeof(some));
  cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &some, sizeof(some));
  const cudaDataType_t y_type = a.out_dtype == OutDtype::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  TANDEM_RETURN_IF_ERROR(LtStatus(cublasLtMatrixLayoutCreate(&p->w, CUDA_R_8F_E4M3, a.k, a.n, a.k), "W layout"));
  TANDEM_RETURN_IF_ERROR(LtStatus(cublasLtMatrixLayoutCreate(&p->x, CUDA_R_8F_E4M3, a.k, a.m, a.k), "x layout"));
  TANDEM_RETURN_IF_ERROR(LtStatus(cublasLtMatrixLayoutCreate(&p->y, y_type, a.n, a.m, a.ldy), "y layout"));
  cublasLtMatmulPreference_t pref = nullptr;
  TANDEM_RETURN_IF_ERROR(LtStatus(cublasLtMatmulPreferenceCreate(&pref), "preference"));
  // Only algorithms that need no more alignment than W, the scratch (x's codes) and y have (the
  // engine's buffers have 256 bytes, other callers may pass less).
  detail::SetPreference(pref, workspace_bytes_, static_cast<uint32_t>(std::get<8>(key)));
  cublasLtMatmulHeuristicResult_t found[1];
  int count = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(lt_), p->op, p->w,
                                                           p->x, p->y, p->y, pref, 1, found, &count);
  cublasLtMatmulPreferenceDestroy(pref);
  TANDEM_RETURN_IF_ERROR(LtStatus(hs, "cublasLtMatmulAlgoGetHeuristic"));
  if (count == 0) {
    return Err(StatusCode::kInternal, "cuBLASLt has no FP8 GEMM for m {} n {} k {} ({} scales)", a.m, a.n, a.k,
               block ? "128x128 block" : "per-channel");
  }
  p->algo = found[0].algo;
  const Plan* out = p.get();
  plans_.emplace(key, std::move(p));
  return out;
}

Status Fp8Gemm::Run(const Fp8LinearArgs& a, void* scratch, size_t scratch_bytes, cudaStream_t stream,
                    const Fp8GemmLayout& layout) {
  TANDEM_RETURN_IF_ERROR(CheckArgs(a));
  if (a.m == 0 || a.n == 0) return Status::Ok();
  if (a.n % 16 != 0 || !Aligned16Ptr(a.y) || a.ldy % 8 != 0) {
    return Err(StatusCode::kInvalidArgument, "Fp8Gemm: n {} and ldy {} must be multiples of 16 / 8, y 16-byte aligned",
               a.n, a.ldy);
  }
  if (scratch == nullptr || scratch_bytes < Fp8LinearScratchBytes(a.m, a.k)) {
    return Err(StatusCode::kInvalidArgument, "Fp8Gemm: scratch of {} bytes, {} needed", scratch_bytes,
               Fp8LinearScratchBytes(a.m, a.k));
  }
  if (dequantize_) return RunDequantized(a, stream);
  const bool block = a.w.scaling == Fp8Scaling::kBlock128;
  auto* codes = static_cast<uint8_t*>(scratch);
  auto* scales = reinterpret_cast<float*>(static_cast<char*>(scratch) + ScalesOffset(a.m, a.k));
  if (a.x_prequantized) {
    // SiluMulQuantizeFp8 writes the default layout's scales.
    if (layout.act_scales != Fp8GemmLayout{}.act_scales) {
      return Err(StatusCode::kInvalidArgument, "Fp8Gemm: prequantized x with a scale layout of its own");
    }
  } else {
    TANDEM_RETURN_IF_ERROR(QuantizeFp8Activations(a.x, a.ldx, a.m, a.k, block, layout, codes, scales, stream));
  }
  TANDEM_ASSIGN_OR_RETURN(const Plan* p, PlanFor(a, codes, layout));
  const void* sa = a.w.scale;
  const void* sb = scales;
  TANDEM_RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof(sa)), "A scale"));
  TANDEM_RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof(sb)), "B scale"));
  const float alpha = 1.0f, beta = 0.0f;
  TANDEM_RETURN_IF_ERROR(LtStatus(
      cublasLtMatmul(static_cast<cublasLtHandle_t>(lt_), p->op, &alpha, a.w.q, p->w, codes, p->x, &beta, a.y,
                     p->y, a.y, p->y, &p->algo, workspace_, workspace_bytes_, stream),
      "cublasLtMatmul"));
  if (a.bias != nullptr) TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchAddBias(Bf16Args(a, nullptr), stream));
  return Status::Ok();
}

#endif  // TANDEM_CUDA_EMU

}  // namespace tandem::cuda
