// Warp-level tensor-core and async-copy helpers for sm_80+ (included only by .cu files), as inline
// PTX: mma.sync m16n8k16 bf16 or f16 (fp32 accumulate), ldmatrix x4 (plain and .trans), cp.async 16 bytes
// (zero-fill when invalid) with commit / wait_group. Under TANDEM_CUDA_EMU each one calls its
// emulation in dev/kernels/emu/cuda_emu.h, which follows the PTX ISA's fragment layouts:
//
//   lane = 4 * g + t (g = lane / 4, t = lane % 4); a bf16x2 register holds the lower column/row in
//   its low half.
//   A (16x16, row): a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..]
//   B (16x8, col):  b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]
//   C/D (16x8 f32): c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1]
//   ldmatrix x4: lane l gives the row address of row l % 8 of matrix l / 8 (16 bytes, 16-byte
//   aligned); r[i] = matrix i's row g, columns 2t..2t+1 (with .trans: rows 2t..2t+1 of column g).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda::detail {

// Two floats as one bf16x2 register (lo in the low half).
__device__ inline uint32_t PackBf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  static_assert(sizeof(v) == sizeof(uint32_t));
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Two floats as one f16x2 register (lo in the low half), round to nearest even.
__device__ inline uint32_t PackF16x2(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  static_assert(sizeof(v) == sizeof(uint32_t));
  return *reinterpret_cast<const uint32_t*>(&v);
}

// A bf16x2 register as f16x2 (each half through float; exact for |x| in f16's normal range).
__device__ inline uint32_t Bf16x2ToF16x2(uint32_t w) {
  const __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(&w);
  return PackF16x2(__low2float(v), __high2float(v));
}

// The online softmax's rescale of a warp's m16n8 fp32 accumulator tiles o[0..N): the rows of
// lane / 4 (c[0..1]) by alpha0, those of lane / 4 + 8 (c[2..3]) by alpha1.
template <int N>
__device__ inline void ScaleAccRows(float (&o)[N][4], float alpha0, float alpha1) {
#pragma unroll
  for (int d = 0; d < N; ++d) {
    o[d][0] *= alpha0;
    o[d][1] *= alpha0;
    o[d][2] *= alpha1;
    o[d][3] *= alpha1;
  }
}

#ifdef TANDEM_CUDA_EMU

__device__ inline void MmaBf16(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  ::emu::MmaM16N8K16Bf16(d, a, b);
}
__device__ inline void MmaF16(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  ::emu::MmaM16N8K16F16(d, a, b);
}
__device__ inline void LdMatrixX4(uint32_t r[4], const void* row) { ::emu::LdMatrix(r, row, false); }
__device__ inline void LdMatrixX4Trans(uint32_t r[4], const void* row) {
  ::emu::LdMatrix(r, row, true);
}
__device__ inline void CpAsync16(void* smem, const void* gmem, bool valid) {
  ::emu::CpAsync16(smem, gmem, valid);
}
// The emulator's ex2.approx.ftz: exact 2^x, denormal results flushed to zero.
__device__ inline float Exp2(float x) {
  const float y = exp2f(x);
  return y < 1.17549435e-38f ? 0.0f : y;
}
__device__ inline void CpAsyncCommit() { ::emu::CpAsyncCommit(); }
template <int N>
__device__ inline void CpAsyncWait() {
  ::emu::CpAsyncWait(N);
}

#else

__device__ inline uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// d += A B (m16n8k16, bf16 inputs, fp32 accumulators).
__device__ inline void MmaBf16(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d += A B (m16n8k16, f16 inputs, fp32 accumulators).
__device__ inline void MmaF16(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ inline void LdMatrixX4(uint32_t r[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(row))
               : "memory");
}

__device__ inline void LdMatrixX4Trans(uint32_t r[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(row))
               : "memory");
}

// 16 bytes global -> shared, asynchronous; !valid writes 16 zero bytes (gmem is not read but must
// be a valid address).
__device__ inline void CpAsync16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :
               : "r"(SmemAddr(smem)), "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
}

// 2^x by the special-function unit, denormal results flushed to zero (exp2 of -inf is +0). exp2f
// without --use_fast_math adds a range test and two multiplies around the same instruction.
__device__ inline float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ inline void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ inline void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#endif

}  // namespace tandem::cuda::detail
