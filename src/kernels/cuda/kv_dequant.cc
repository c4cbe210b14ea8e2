#include "kernels/cuda/kv_dequant.h"

#include "kernels/cuda/cuda_check.h"

namespace tandem::cuda {

Status DequantizeKvBlocks(const DequantizeKvBlocksArgs& a, cudaStream_t stream) {
  if (a.num_blocks < 0 || a.block_size <= 0 || a.num_kv_heads <= 0 || a.head_dim <= 0 ||
      a.head_dim % 16 != 0) {
    return Err(StatusCode::kInvalidArgument, "DequantizeKvBlocks: num_blocks {}, block_size {}, "
               "num_kv_heads {}, head_dim {} (a multiple of 16)", a.num_blocks, a.block_size,
               a.num_kv_heads, a.head_dim);
  }
  if (a.num_blocks == 0) return Status::Ok();
  if (a.src_pool == nullptr || a.src_blocks == nullptr || a.dst_pool == nullptr ||
      reinterpret_cast<uintptr_t>(a.src_pool) % 16 != 0 || reinterpret_cast<uintptr_t>(a.dst_pool) % 16 != 0) {
    return Err(StatusCode::kInvalidArgument, "DequantizeKvBlocks: null or not 16-byte aligned pointer");
  }
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchDequantizeKvBlocks(a, stream));
  return Status::Ok();
}

}  // namespace tandem::cuda
