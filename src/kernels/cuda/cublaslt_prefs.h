// cuBLASLt heuristic preferences shared by the GEMM tuner (gemm_tune.cc) and the FP8 GEMM
// (fp8_linear.cc): the alignment of a buffer, and a preference that allows no algorithm needing
// more (cuBLASLt assumes 256 bytes otherwise; NVIDIA's cuBLAS documentation,
// CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES) with a workspace limit. Host code only.
#pragma once

#include <cstddef>
#include <cstdint>

#ifndef TANDEM_CUDA_EMU
#include <cublasLt.h>
#endif

namespace tandem::cuda::detail {

// The largest power of two up to 256 dividing the address.
inline int AlignmentOf(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && v % static_cast<uintptr_t>(a) != 0) a /= 2;
  return a;
}

#ifndef TANDEM_CUDA_EMU
// Sets the workspace limit and the minimum alignment of A, B, C and D on `pref`.
inline void SetPreference(cublasLtMatmulPreference_t pref, size_t workspace_bytes, uint32_t align) {
  const uint64_t ws = workspace_bytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
  }
}
#endif

}  // namespace tandem::cuda::detail
