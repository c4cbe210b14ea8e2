#include "kernels/cuda/paged_attention.h"

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"

namespace tandem::cuda {
namespace {

// The checks PagedPrefill and PagedDecode share (their args name these fields alike): head counts,
// block size, head_dim in the op's set, the batch size.
template <typename Args>
Status CheckShape(const char* op, const Args& a, bool head_dim_256, const char* count_name,
                  int count) {
  if (a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 ||
      a.block_size <= 0) {
    return Err(StatusCode::kInvalidArgument, "{}: num_heads {} must be a positive multiple of "
               "num_kv_heads {}; block_size {}", op, a.num_heads, a.num_kv_heads, a.block_size);
  }
  if (a.head_dim != 64 && a.head_dim != 128 && !(head_dim_256 && a.head_dim == 256)) {
    return Err(StatusCode::kUnimplemented, "{}: head_dim {} ({} supported)", op, a.head_dim,
               head_dim_256 ? "64, 128 or 256" : "64 or 128");
  }
  if (a.num_seqs < 0 || a.num_seqs > 65535 || count < 0) {
    return Err(StatusCode::kInvalidArgument, "{}: num_seqs {} (at most 65535), {} {}", op,
               a.num_seqs, count_name, count);
  }
  return Status::Ok();
}

// The KV pool of either dtype (prefill has bf16 only); null when none or both are given.
const void* PoolOf(const PagedPrefillArgs& a) { return a.kv_pool; }
const void* PoolOf(const PagedDecodeArgs& a) {
  if ((a.kv_pool == nullptr) == (a.kv_pool_fp8 == nullptr)) return nullptr;
  return a.kv_pool != nullptr ? static_cast<const void*>(a.kv_pool) : a.kv_pool_fp8;
}

// Pointers (the shared ones and the op's two index arrays) and row layout: q rows a multiple of 8
// elements apart, q and kv_pool 16-byte aligned (both kernels load 16 bytes at a time), both
// strides >= num_heads * head_dim; out's stride a multiple of 8 too when `out_vectorized`.
template <typename Args>
Status CheckBuffers(const char* op, const Args& a, const void* index0, const void* index1,
                    bool out_vectorized) {
  if (a.q == nullptr || a.out == nullptr || a.block_tables == nullptr || index0 == nullptr ||
      index1 == nullptr) {
    return Err(StatusCode::kInvalidArgument, "{}: null pointer", op);
  }
  if (PoolOf(a) == nullptr) {
    return Err(StatusCode::kInvalidArgument, "{}: one KV pool (kv_pool{}) must be given", op,
               std::is_same_v<Args, PagedDecodeArgs> ? " or kv_pool_fp8" : "");
  }
  const int64_t row = int64_t{a.num_heads} * a.head_dim;
  if (a.q_stride < row || a.out_stride < row || a.q_stride % 8 != 0 ||
      (out_vectorized && a.out_stride % 8 != 0) || reinterpret_cast<uintptr_t>(a.q) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(PoolOf(a)) % 16 != 0) {
    return Err(StatusCode::kInvalidArgument, "{}: row strides (q {}, out {}) must be >= num_heads "
               "* head_dim = {} (q{}: a multiple of 8), q and kv_pool 16-byte aligned", op,
               a.q_stride, a.out_stride, row, out_vectorized ? " and out" : "");
  }
  return Status::Ok();
}

}  // namespace

Status PagedPrefill(const PagedPrefillArgs& a, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckShape("PagedPrefill", a, false, "max_query_len", a.max_query_len));
  if (a.num_seqs == 0 || a.max_query_len == 0) return Status::Ok();
  TANDEM_RETURN_IF_ERROR(CheckBuffers("PagedPrefill", a, a.query_start_loc, a.start_pos, true));
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchPagedPrefill(a, stream));
  return Status::Ok();
}

Status PagedDecode(const PagedDecodeArgs& a, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckShape("PagedDecode", a, true, "max_context_len", a.max_context_len));
  if (a.num_seqs == 0) return Status::Ok();
  TANDEM_RETURN_IF_ERROR(CheckBuffers("PagedDecode", a, a.context_lens, a.context_lens, false));
  if (a.num_splits < 0 || a.num_splits > kPagedDecodeMaxSplits) {
    return Err(StatusCode::kInvalidArgument, "PagedDecode: num_splits {} outside [0, {}]",
               a.num_splits, kPagedDecodeMaxSplits);
  }
  if (a.kv_pool_fp8 != nullptr &&
      !detail::PagedDecodeMmaFits(a.num_heads, a.num_kv_heads, a.head_dim, CurrentDeviceLimits())) {
    return Err(StatusCode::kUnimplemented, "PagedDecode: an FP8 KV pool needs the tensor-core "
               "kernel (head_dim 64 or 128, at most 16 query heads per KV head, sm_80+); "
               "num_heads {}, num_kv_heads {}, head_dim {}", a.num_heads, a.num_kv_heads, a.head_dim);
  }
  const size_t need = PagedDecodeWorkspaceBytes(a);
  if (need > 0 && (a.workspace == nullptr || a.workspace_bytes < need ||
                   reinterpret_cast<uintptr_t>(a.workspace) % 16 != 0)) {
    return Err(StatusCode::kInvalidArgument, "PagedDecode: workspace of {} bytes, {} needed "
               "(16-byte aligned)", a.workspace_bytes, need);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchPagedDecode(a, stream));
  return Status::Ok();
}

Status PagedDecodeInitWorkspace(void* workspace, size_t bytes, cudaStream_t stream) {
  if (bytes > 0 && workspace == nullptr) {
    return Err(StatusCode::kInvalidArgument, "PagedDecodeInitWorkspace: null workspace of {} bytes",
               bytes);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchPagedDecodeInitWorkspace(workspace, bytes, stream));
  return Status::Ok();
}

}  // namespace tandem::cuda
