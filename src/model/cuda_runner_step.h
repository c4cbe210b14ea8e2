// Private to the CUDA runner's step (cuda_runner_step.cc: planning, upload, sampling) and its
// layers (cuda_runner_layers.cc: the forward pass RunModel enqueues): the shape of one step and
// where its inputs lie in the one upload.
#pragma once
#ifdef TANDEM_HAVE_CUDA

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "model/cuda_decode_graphs.h"
#include "model/cuda_runner_impl.h"

namespace tandem {
namespace cuda_step {

inline size_t Align16(size_t n) { return (n + 15) / 16 * 16; }

// Byte offsets of a step's inputs in one upload (16-byte aligned): slots int64 [T], ids [T],
// positions [T], query_start_loc [S + 1], start_pos [S], context_lens [S], block_tables
// [S, stride], logit_rows [R]; all int32 but the slots. With FP8 KV and G > 0 source blocks to
// gather for the prefill slices (StepPlan::fp8_groups), then their renumbered block tables
// fp8_tables [S, stride] (rows of the prefill slices only) and the source block ids fp8_src [G].
struct MetaLayout {
  size_t slots, ids, pos, qsl, start, ctx, tables, rows, fp8_tables, fp8_src, total;
  MetaLayout(int T, int S, int stride, int R, int G = 0) {
    size_t o = 0;
    auto take = [&o](size_t bytes) { const size_t at = o; o = Align16(o + bytes); return at; };
    slots = take(sizeof(int64_t) * T);
    ids = take(sizeof(int32_t) * T);
    pos = take(sizeof(int32_t) * T);
    qsl = take(sizeof(int32_t) * (S + 1));
    start = take(sizeof(int32_t) * S);
    ctx = take(sizeof(int32_t) * S);
    tables = take(sizeof(int32_t) * S * static_cast<size_t>(stride));
    rows = take(sizeof(int32_t) * R);
    fp8_tables = take(G > 0 ? sizeof(int32_t) * S * static_cast<size_t>(stride) : 0);
    fp8_src = take(sizeof(int32_t) * G);
    total = o;
  }
};

// Device results of the picks: ids int32, max logits (after a sampled pick: the chosen token's raw
// logit), log-sum-exps, SampleRows' status int32, each [cap] (cap >= kMaxDecodeGraphBatch so graph
// steps always find them at the same place).
inline size_t PicksBytes(int cap) { return 4 * Align16(sizeof(float) * cap); }

}  // namespace cuda_step

// The shape of one step (host).
struct CudaModelRunner::StepPlan {
  int T = 0;         // token rows through the layers (the padded batch in a graph step)
  int num_seqs = 0;  // sequences (padded likewise)
  int stride = 1;    // block-table row stride
  int max_query_len = 0, max_context_len = 0;
  bool decode = true;   // every slice has one token
  // The leading slices of one token (all of them in a decode step). In a step mixing prefill
  // chunks with decode rows they are attended by PagedDecode, the rest by PagedPrefill.
  int decode_prefix = 0;
  // The sequences PagedDecode attends: every one of a decode step (padding included), else the
  // decode prefix.
  int decode_seqs() const { return decode ? num_seqs : decode_prefix; }
  bool padded = false;  // a decode-graph step (rows = token rows, padding rows at the end)
  int rows = 0;         // logits rows computed
  bool gather = false;  // rows gathered by logit_rows (else token rows 0..rows-1)
  int num_splits = 0;   // PagedDecode splits (0: automatic)
  int sample_begin = 0, sample_rows = 0;     // rows ArgmaxLogSumExp covers
  int picks_cap = kMaxDecodeGraphBatch;      // rows the picks buffer holds
  std::vector<std::pair<int, int>> out_runs;  // (row, count) of logits returned, in order
  std::vector<int> arg_rows;  // logits row of each kPick slice, in batch order
  std::vector<int> arg_k;     // its num_logprobs
  std::vector<const PickSpec*> arg_pick;  // its PickSpec (null: greedy)
  bool sampled = false;       // SampleOnDevice ran: the status column is valid
  // FP8 KV, a step with prefill slices: their blocks are gathered to bf16 (kv_dequant.h) into the
  // scratch pool, a group of whole sequences at a time (as many as fit kFp8PrefillScratchBytes, at
  // least one), each group's blocks numbered from 0 in fp8_tables; the group's source block ids
  // are fp8_src[src_begin, src_begin + blocks).
  struct Fp8Group {
    int seq_begin = 0, seq_end = 0, src_begin = 0, blocks = 0, max_query_len = 0;
  };
  std::vector<Fp8Group> fp8_groups;
  int fp8_src_total = 0;   // G: entries of fp8_src
  int fp8_max_blocks = 0;  // the largest group's blocks (the scratch it needs)
};

}  // namespace tandem

#endif  // TANDEM_HAVE_CUDA
