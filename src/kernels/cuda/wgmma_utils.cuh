// Warpgroup tensor-core helpers for sm_90a (Hopper: H100, H200), included only by .cu files: the
// wgmma.mma_async instructions, their fences, and shared-memory matrix descriptors for the
// 128-byte-swizzled layout. Source: PTX ISA 8.x, "Asynchronous Warpgroup Level Matrix Multiply-
// Accumulate Instructions" (wgmma.mma_async, the matrix descriptor format, the canonical layouts).
//
// Only compiled where TANDEM_WGMMA is defined: the device pass for sm_90a (compute_90a), which CMake
// builds when TANDEM_CUDA_ARCHS names 90a (the default). A plain sm_90 pass, every other
// architecture, the host pass and the CPU emulator see nothing of it.
//
// Layouts (bf16, 128-byte swizzle): a tile of R rows x 64 columns (128 bytes a row) is R / 8 atoms
// of 8 rows x 128 bytes, 1024-byte aligned, stored one after another; the 16-byte chunk c of row r
// sits at chunk position c ^ (r % 8) of its row (SwizzledOffset). A tile 128 columns wide is two
// such tiles, columns 0-63 then 64-127.
//   K-major operand (A = Q, B = K: the reduction dimension contiguous): stride byte offset (SBO) =
//   1024 (from one 8-row atom to the next), leading byte offset unused; the k-th 16-column step
//   starts 32 bytes further into the row (the hardware applies the swizzle to the address).
//   MN-major operand (B = V, imm-trans-b = 1: N contiguous, K = the rows): LBO = the bytes from one
//   64-column half to the next along N, SBO = 1024 (from one 8-row group of K to the next).
// Accumulators of m64nNk16 (fp32): warp w of the warpgroup owns rows 16w..16w+15; lane 4g + t holds
// d[j][0..1] = D[16w + g][8j + 2t .. 8j + 2t + 1] and d[j][2..3] = the same columns of row 16w + g + 8,
// which is also the mma.sync m16n8 accumulator layout (mma_utils.cuh). An A operand from registers
// uses the mma.sync m16n8k16 A fragment of each warp's 16 rows.
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(TANDEM_CUDA_EMU)
#define TANDEM_WGMMA 1
#endif

namespace tandem::cuda::detail {

// Byte offset of 16-byte chunk `chunk` (0 .. 8 * halves - 1) of row `row` in a 128-byte-swizzled
// tile of `rows` rows (each 64-column half rows * 128 bytes).
__host__ __device__ inline uint32_t SwizzledOffset(int row, int chunk, int rows) {
  return static_cast<uint32_t>((chunk >> 3) * rows * 128 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

#if defined(TANDEM_WGMMA)

// Matrix descriptor (PTX ISA "Matrix Descriptor Format"): bits 0-13 start address >> 4, 16-29
// leading byte offset >> 4, 32-45 stride byte offset >> 4, 62-63 swizzle mode (1: 128 bytes).
__device__ inline uint64_t WgmmaDesc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

__device__ inline void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void WgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N of this warpgroup's committed wgmma groups are pending (older ones first).
template <int N>
__device__ inline void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Generic-proxy writes to shared memory (st.shared, cp.async) made visible to the async proxy that
// wgmma reads through; each writing thread, before the barrier that precedes the wgmma.
__device__ inline void FenceProxyAsync() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Keep the compiler from moving reads or writes of these registers across the point (after a
// WgmmaWait: the asynchronous results are there; the A registers of an in-flight wgmma stay live).
__device__ inline void FenceRegs(float (&d)[16][4]) {
  asm volatile(""
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                 "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                 "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                 "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                 "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                 "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                 "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
                 "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
                 "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
                 "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
                 "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
                 "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
                 "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
                 "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
                 "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
                 "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
               :
               : "memory");
}
__device__ inline void FenceRegs(uint32_t (&a)[8][4]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    asm volatile("" : "+r"(a[i][0]), "+r"(a[i][1]), "+r"(a[i][2]), "+r"(a[i][3])::"memory");
  }
}

// d = A B (+ d when accumulate != 0), m64n128k16, bf16 inputs, fp32 accumulators; A and B from
// shared memory through descriptors, both K-major.
__device__ inline void WgmmaM64N128K16SS(float (&d)[16][4], uint64_t a_desc, uint64_t b_desc,
                                         int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
        "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
        "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
        "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "l"(a_desc), "l"(b_desc), "r"(accumulate));
}

// d += A B, m64n128k16: A (bf16) from registers, the m16n8k16 A fragment of each warp's 16 rows;
// B from shared memory, MN-major (imm-trans-b = 1).
__device__ inline void WgmmaM64N128K16RSTransB(float (&d)[16][4], const uint32_t (&a)[4],
                                               uint64_t b_desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
        "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
        "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
        "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
}

#endif  // TANDEM_WGMMA

}  // namespace tandem::cuda::detail
