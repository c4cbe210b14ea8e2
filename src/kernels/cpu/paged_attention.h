// Causal grouped-query attention of one sequence's new tokens over a paged KV cache.
//
// The slice's tokens sit at positions [start_pos, start_pos + num_tokens); token i attends to
// positions [0, start_pos + i] whose K/V are already in the pool (write the new ones first with
// ReshapeAndCache). Query head h reads KV head h / (num_heads / num_kv_heads).
//   out = softmax(q k^T * scale) v, softmax in fp32 with max subtraction (HF eager attention).
#pragma once

#include <cstdint>

namespace tandem::cpu {

struct PagedAttentionArgs {
  const float* q = nullptr;             // [num_tokens, num_heads, head_dim]
  int num_tokens = 0;
  int start_pos = 0;
  const float* kv_pool = nullptr;       // [num_blocks, 2, block_size, num_kv_heads, head_dim]
  // Or an FP8 E4M3 pool of the same layout (ReshapeAndCacheFp8): element * its KV head's scale.
  const uint8_t* kv_pool_fp8 = nullptr;
  const float* k_scale = nullptr;       // [num_kv_heads], with kv_pool_fp8
  const float* v_scale = nullptr;
  const int32_t* block_table = nullptr; // [>= ceil((start_pos + num_tokens) / block_size)]
  int block_size = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float scale = 1.0f;                   // usually 1 / sqrt(head_dim)
  float* out = nullptr;                 // [num_tokens, num_heads, head_dim]
  // The KV heads [kv_head_begin, kv_head_end) and their query heads only (-1: num_kv_heads), so
  // that calls on disjoint ranges may run in parallel (they write disjoint heads of out).
  int kv_head_begin = 0;
  int kv_head_end = -1;
};

// Gathers the sequence's K/V into contiguous fp32 buffers (dequantizing an FP8 pool) and runs query
// tiles through sgemm.
void PagedAttention(const PagedAttentionArgs& args);

// The same with plain loops, for tests (fp32 pools only).
void PagedAttentionNaive(const PagedAttentionArgs& args);

}  // namespace tandem::cpu
