#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/fp8_utils.cuh"
#include "kernels/cuda/kv_dequant.h"

namespace tandem::cuda::detail {
namespace {

constexpr int kThreadsPerBlock = 256;

// One thread per 16 codes (one 16-byte load, two 16-byte stores); the grid covers every chunk of
// every listed block.
__global__ void DequantizeKvBlocksKernel(DequantizeKvBlocksArgs a, int64_t chunks_per_block) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= chunks_per_block * a.num_blocks) return;
  const int64_t i = idx / chunks_per_block, c = idx % chunks_per_block;
  const int64_t half = chunks_per_block / 2;  // chunks of K (then V)
  const int kvh = static_cast<int>((c % half) * 16 / a.head_dim % a.num_kv_heads);
  const float* scales = c < half ? a.k_scales : a.v_scales;
  const float scale = scales != nullptr ? scales[kvh] : 1.0f;
  const uint4 codes = reinterpret_cast<const uint4*>(a.src_pool)[a.src_blocks[i] * chunks_per_block + c];
  uint32_t w[8];
  Fp8x16ToBf16x16(codes, w);
  uint4* dst = reinterpret_cast<uint4*>(a.dst_pool) + (i * chunks_per_block + c) * 2;
#pragma unroll
  for (int half16 = 0; half16 < 2; ++half16) {  // codes 0-7, then 8-15
    uint4 v = make_uint4(w[4 * half16], w[4 * half16 + 1], w[4 * half16 + 2], w[4 * half16 + 3]);
    if (scale != 1.0f) {
      float f[8];
      Bf16x8ToFloat(v, f);
#pragma unroll
      for (int j = 0; j < 8; ++j) f[j] *= scale;
      v = FloatToBf16x8(f);
    }
    dst[half16] = v;
  }
}

}  // namespace

cudaError_t LaunchDequantizeKvBlocks(const DequantizeKvBlocksArgs& a, cudaStream_t stream) {
  const int64_t chunks_per_block = int64_t{2} * a.block_size * a.num_kv_heads * a.head_dim / 16;
  const int64_t total = chunks_per_block * a.num_blocks;
  if (total == 0) return cudaSuccess;
  const int64_t grid = (total + kThreadsPerBlock - 1) / kThreadsPerBlock;
  TANDEM_LAUNCH(DequantizeKvBlocksKernel, static_cast<unsigned>(grid), kThreadsPerBlock, 0, stream, a,
                chunks_per_block);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::detail
