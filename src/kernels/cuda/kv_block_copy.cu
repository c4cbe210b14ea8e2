// The KV block copy kernel (kv_block_copy.h). The work is (entry, layer, piece of a block): one
// CTA moves one piece of one layer's block at a time, 256 threads x 16 bytes x 4 loads in flight
// a round; a CTA per piece, or max_ctas CTAs striding over them.
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kv_block_copy.h"

namespace tandem::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr uint64_t kPieceBytes = 16384;  // a 64 KB block of one layer in 4 CTAs

__global__ void __launch_bounds__(kThreads) KvBlockCopyKernel(KvCopyLaunch p, uint32_t pieces) {
  const uint64_t total = static_cast<uint64_t>(p.num_entries) * p.num_layers * pieces;
  for (uint64_t w = blockIdx.x; w < total; w += gridDim.x) {
    const uint32_t piece = static_cast<uint32_t>(w % pieces);
    const int l = static_cast<int>((w / pieces) % p.num_layers);
    const int e = static_cast<int>(w / pieces / p.num_layers);
    char* pool = static_cast<char*>(p.layer_base[l]) + static_cast<uint64_t>(p.block_id[e]) * p.block_bytes;
    char* host = static_cast<char*>(p.host[e]) + static_cast<uint64_t>(l) * p.block_bytes;
    const uint64_t begin = static_cast<uint64_t>(piece) * kPieceBytes;
    const uint64_t end = begin + kPieceBytes < p.block_bytes ? begin + kPieceBytes : p.block_bytes;
    const uint4* src = reinterpret_cast<const uint4*>(p.to_host ? pool : host);
    uint4* dst = reinterpret_cast<uint4*>(p.to_host ? host : pool);
    const uint64_t n = end / 16;
    for (uint64_t i = begin / 16 + threadIdx.x; i < n; i += kThreads * kUnroll) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint64_t j = i + static_cast<uint64_t>(u) * kThreads;
        if (j < n) v[u] = src[j];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint64_t j = i + static_cast<uint64_t>(u) * kThreads;
        if (j < n) dst[j] = v[u];
      }
    }
  }
}

}  // namespace

cudaError_t LaunchKvBlockCopy(const KvCopyLaunch& p, cudaStream_t stream) {
  if (p.num_entries == 0 || p.num_layers == 0 || p.block_bytes == 0) return cudaSuccess;
  const auto pieces = static_cast<uint32_t>((p.block_bytes + kPieceBytes - 1) / kPieceBytes);
  const uint64_t work = static_cast<uint64_t>(p.num_entries) * p.num_layers * pieces;
  const auto grid = static_cast<unsigned>(p.max_ctas > 0 && static_cast<uint64_t>(p.max_ctas) < work ? p.max_ctas : work);
  TANDEM_LAUNCH(KvBlockCopyKernel, dim3(grid), kThreads, 0, stream, p, pieces);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::detail
