// cuda_op_check's probe of the warpgroup MMA building blocks (kernels/cuda/wgmma_utils.cuh) that the
// Hopper prefill kernel uses, each on one 64 x 128 x 128 product against a CPU reference, so that a
// wrong descriptor or fragment layout shows up by itself rather than inside attention:
//   mode 0: D = A B^T, A [64][128] and B [128 n][128 k] K-major, both from swizzled shared memory
//           (S = Q K^T's form);
//   mode 1: D = A B, A from registers (m16n8k16 fragments), B [128 k][128 n] MN-major from swizzled
//           shared memory, imm-trans-b (O += P V's form).
// No fmt here (nvcc); the rows are made in op_check_attention.cc.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/mma_utils.cuh"
#include "kernels/cuda/wgmma_utils.cuh"

namespace tandem::opcheck {
namespace {

using tandem::cuda::detail::SwizzledOffset;

__global__ void __launch_bounds__(128) WgmmaProbeKernel(const __nv_bfloat16* a,
                                                        const __nv_bfloat16* b, float* d, int mode) {
#if defined(TANDEM_WGMMA)
  using namespace tandem::cuda::detail;
  TANDEM_DYNAMIC_SHARED(smem_raw);
  unsigned char* smem = smem_raw + ((1024u - (SmemAddr(smem_raw) & 1023u)) & 1023u);
  unsigned char* s_a = smem;               // [2 halves][64 rows][128 B]
  unsigned char* s_b = smem + 64 * 256;    // [2 halves][128 rows][128 B]
  const int tid = threadIdx.x;
  for (int c = tid; c < 64 * 16; c += 128) {
    *reinterpret_cast<uint4*>(s_a + SwizzledOffset(c / 16, c % 16, 64)) =
        *reinterpret_cast<const uint4*>(a + (c / 16) * 128 + (c % 16) * 8);
  }
  for (int c = tid; c < 128 * 16; c += 128) {
    *reinterpret_cast<uint4*>(s_b + SwizzledOffset(c / 16, c % 16, 128)) =
        *reinterpret_cast<const uint4*>(b + (c / 16) * 128 + (c % 16) * 8);
  }
  FenceProxyAsync();
  __syncthreads();
  float acc[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const uint32_t sa = SmemAddr(s_a), sb = SmemAddr(s_b);
  if (mode == 0) {
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      WgmmaM64N128K16SS(acc, WgmmaDesc(sa + (kk >> 2) * 64 * 128 + (kk & 3) * 32, 16, 1024),
                        WgmmaDesc(sb + (kk >> 2) * 128 * 128 + (kk & 3) * 32, 16, 1024), kk > 0);
    }
    WgmmaCommit();
    WgmmaWait<0>();
    FenceRegs(acc);
  } else {
    uint32_t af[8][4];
    const uint32_t* a32 = reinterpret_cast<const uint32_t*>(a);
    const int r0 = 16 * warp + g;
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
      af[ks][0] = a32[(r0 * 128 + 16 * ks + 2 * t) / 2];
      af[ks][1] = a32[((r0 + 8) * 128 + 16 * ks + 2 * t) / 2];
      af[ks][2] = a32[(r0 * 128 + 16 * ks + 8 + 2 * t) / 2];
      af[ks][3] = a32[((r0 + 8) * 128 + 16 * ks + 8 + 2 * t) / 2];
    }
    WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
      WgmmaM64N128K16RSTransB(acc, af[ks], WgmmaDesc(sb + ks * 2048, 128 * 128, 1024));
    }
    WgmmaCommit();
    WgmmaWait<0>();
    FenceRegs(acc);
    FenceRegs(af);
  }
  const int r0 = 16 * warp + g;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    d[r0 * 128 + 8 * j + 2 * t] = acc[j][0];
    d[r0 * 128 + 8 * j + 2 * t + 1] = acc[j][1];
    d[(r0 + 8) * 128 + 8 * j + 2 * t] = acc[j][2];
    d[(r0 + 8) * 128 + 8 * j + 2 * t + 1] = acc[j][3];
  }
#endif
}

}  // namespace

// a [64][128], b [128][128] bf16, d [64][128] fp32, device pointers; mode as above. Needs an sm_90
// device and a build with sm_90a code (cuda::detail::PagedPrefillWgmmaBuilt()).
cudaError_t LaunchWgmmaProbe(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d, int mode) {
  constexpr int kBytes = 64 * 256 + 128 * 256 + 1024;
  cudaError_t err = cudaFuncSetAttribute(&WgmmaProbeKernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  if (err != cudaSuccess) return err;
  auto* kernel = &WgmmaProbeKernel;
  TANDEM_LAUNCH(kernel, 1, 128, kBytes, nullptr, a, b, d, mode);
  return cudaGetLastError();
}

}  // namespace tandem::opcheck
