#include "kernels/cuda/paged_attention.h"

#include <cstdint>

#include "kernels/cuda/cuda_check.h"

namespace tandem::cuda {
namespace {

Status CheckHeads(const char* op, int num_heads, int num_kv_heads, int block_size) {
  if (num_heads <= 0 || num_kv_heads <= 0 || num_heads % num_kv_heads != 0 || block_size <= 0) {
    return Err(StatusCode::kInvalidArgument, "{}: num_heads {} must be a positive multiple of "
               "num_kv_heads {}; block_size {}", op, num_heads, num_kv_heads, block_size);
  }
  return Status::Ok();
}

}  // namespace

Status PagedPrefill(const PagedPrefillArgs& a, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckHeads("PagedPrefill", a.num_heads, a.num_kv_heads, a.block_size));
  if (a.head_dim != 64 && a.head_dim != 128) {
    return Err(StatusCode::kUnimplemented, "PagedPrefill: head_dim {} (64 or 128 supported)",
               a.head_dim);
  }
  if (a.num_seqs < 0 || a.max_query_len < 0 || a.num_seqs > 65535) {
    return Err(StatusCode::kInvalidArgument, "PagedPrefill: num_seqs {} (at most 65535), "
               "max_query_len {}", a.num_seqs, a.max_query_len);
  }
  if (a.num_seqs == 0 || a.max_query_len == 0) return Status::Ok();
  if (a.q == nullptr || a.out == nullptr || a.kv_pool == nullptr || a.query_start_loc == nullptr ||
      a.start_pos == nullptr || a.block_tables == nullptr) {
    return Err(StatusCode::kInvalidArgument, "PagedPrefill: null pointer");
  }
  const int64_t row = int64_t{a.num_heads} * a.head_dim;
  if (a.q_stride < row || a.out_stride < row || a.q_stride % 8 != 0 || a.out_stride % 8 != 0) {
    return Err(StatusCode::kInvalidArgument, "PagedPrefill: row strides (q {}, out {}) must be "
               "multiples of 8 and >= num_heads * head_dim = {}", a.q_stride, a.out_stride, row);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchPagedPrefill(a, stream));
  return Status::Ok();
}

Status PagedDecode(const PagedDecodeArgs& a, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckHeads("PagedDecode", a.num_heads, a.num_kv_heads, a.block_size));
  if (a.head_dim != 64 && a.head_dim != 128 && a.head_dim != 256) {
    return Err(StatusCode::kUnimplemented, "PagedDecode: head_dim {} (64, 128 or 256 supported)",
               a.head_dim);
  }
  if (a.num_seqs < 0 || a.num_seqs > 65535 || a.max_context_len < 0) {
    return Err(StatusCode::kInvalidArgument, "PagedDecode: num_seqs {} (at most 65535), "
               "max_context_len {}", a.num_seqs, a.max_context_len);
  }
  if (a.num_seqs == 0) return Status::Ok();
  if (a.q == nullptr || a.out == nullptr || a.kv_pool == nullptr || a.context_lens == nullptr ||
      a.block_tables == nullptr) {
    return Err(StatusCode::kInvalidArgument, "PagedDecode: null pointer");
  }
  const int64_t row = int64_t{a.num_heads} * a.head_dim;
  if (a.q_stride < row || a.out_stride < row || a.q_stride % 8 != 0 ||
      reinterpret_cast<uintptr_t>(a.q) % 16 != 0 || reinterpret_cast<uintptr_t>(a.kv_pool) % 16 != 0) {
    return Err(StatusCode::kInvalidArgument, "PagedDecode: row strides (q {} (a multiple of 8), "
               "out {}) below num_heads * head_dim = {}, or q / kv_pool not 16-byte aligned",
               a.q_stride, a.out_stride, row);
  }
  if (a.num_splits < 0 || a.num_splits > kPagedDecodeMaxSplits) {
    return Err(StatusCode::kInvalidArgument, "PagedDecode: num_splits {} outside [0, {}]",
               a.num_splits, kPagedDecodeMaxSplits);
  }
  const size_t need = PagedDecodeWorkspaceBytes(a);
  if (need > 0 && (a.workspace == nullptr || a.workspace_bytes < need)) {
    return Err(StatusCode::kInvalidArgument, "PagedDecode: workspace of {} bytes, {} needed",
               a.workspace_bytes, need);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchPagedDecode(a, stream));
  return Status::Ok();
}

}  // namespace tandem::cuda
