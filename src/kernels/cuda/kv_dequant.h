// FP8 KV blocks to bf16 on the GPU: the prefill path of an FP8 KV cache (--kv-cache-dtype fp8). The
// prefill attention kernels read bf16 pools (paged_attention.h), so before PagedPrefill the blocks
// of the step's prefill sequences are gathered from the FP8 pool into a bf16 scratch pool, in the
// order the caller lists them, and the prefill runs over that pool with block tables renumbered to
// it. Per element: bf16(code * scale) with the code's value exact (fp8_utils.cuh) and one rounding
// of the product (none with the uncalibrated scale 1.0: every e4m3 value is a bf16 value).
//
// Pool layouts (one layer): [num_blocks, 2 (K,V), block_size, num_kv_heads, head_dim], FP8 codes
// (kernels/cpu/fp8.h) in the source, bf16 in the destination. Device pointers; asynchronous.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

struct DequantizeKvBlocksArgs {
  const uint8_t* src_pool = nullptr;     // FP8 pool
  const int32_t* src_blocks = nullptr;   // [num_blocks]: destination block i <- source block src_blocks[i]
  int num_blocks = 0;
  __nv_bfloat16* dst_pool = nullptr;     // [num_blocks, 2, block_size, num_kv_heads, head_dim]
  const float* k_scales = nullptr;       // [num_kv_heads] fp32; null: 1.0
  const float* v_scales = nullptr;
  int block_size = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // a multiple of 16
};

namespace detail {
cudaError_t LaunchDequantizeKvBlocks(const DequantizeKvBlocksArgs& args, cudaStream_t stream);
}  // namespace detail
}  // namespace tandem::cuda

#ifndef __CUDACC__
#include "common/status.h"

namespace tandem::cuda {

// Errors: InvalidArgument (sizes, a head_dim not a multiple of 16, null pointers, pools not 16-byte
// aligned), Internal (CUDA). Block ids are device values: the caller validates them.
Status DequantizeKvBlocks(const DequantizeKvBlocksArgs& args, cudaStream_t stream);

}  // namespace tandem::cuda
#endif
