// The sampling pick on the GPU: penalties, temperature, min-p, top-k, top-p and the draw, per row
// of fp32 logits, with the rules of the CPU reference kernels/cpu/sample.h (engine/sampler.h wraps
// it): the same u gives the same token, except where u * total (or the top-p / min-p cut) lies
// within rounding (~1e-14 relative) of a cumulative boundary, since the sums run in another order
// and CUDA's exp(double) may differ from the host's by an ulp.
//
//   ApplyPenaltiesSaving: per entry (row, token_id, output_count), in place on logits[row, token_id]:
//       repetition r != 1: l > 0 ? l / r : l * r; then, output_count c > 0 and (f, q) != 0:
//       l - (float(c) * f + q); IEEE fp32 without contraction (as the host). The old value goes to
//       saved[entry]. Entries of one row must name distinct ids (cpu::MakePenaltyEntries).
//   RestorePenalties: logits[row, token_id] = saved[entry] (the raw logits again, for logprobs).
//   SampleRows: one CTA per row (256 threads).
//     temperature <= 0: greedy (the largest logit, lowest id on ties).
//     Else p_i = exp(double(logit_i - max) / T) (as the host, in double); pass 2 counts the
//     candidates (p > 0, not p < min_p), sums their mass per thread (contiguous chunks of ids) and
//     histograms them by x = -log p (1024 buckets of width 1/32, the last open).
//     - neither top-k nor top-p active: the draw walks ids in order: a block scan of the chunk
//       sums finds the chunk where u * total falls, one warp walks it.
//     - else: the buckets up to the one holding the k-th candidate (top-k) or the one after the
//       one where the mass reaches top_p * total (top-p alone) bound the survivors; those
//       candidates (at most kSampleMaxCandidates) are compacted into shared memory and
//       bitonic-sorted by (logit desc, id asc) = the host's (p desc, id asc); top-k, top-p and the
//       draw then follow the host on that list (sorted order with top-p, else re-sorted by id).
//       More candidates than that: the row is not picked here (status 1: the caller samples it on
//       the host from its logits, e.g. top-p over a very flat distribution without top-k).
//   ChosenLogits: out[row] = logits[row, token_ids[row]] (the raw logit of the pick, for its
//       log-probability logit - lse).
//   Shapes: logits [num_rows, vocab] row stride ld; specs, token_ids, status: [num_rows]; entries,
//   saved: [num_entries]. Device pointers; asynchronous on `stream`; no allocation (graph-safe).
// Algorithm: the survivor sets are prefixes of the sorted order, so a radix-style histogram bound
// plus a sort of the few candidates gives them (the shape of FlashInfer's / vLLM's top-k/top-p
// samplers; here exact to the host's rules instead of rejection sampling).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

// One row's sampling parameters and its uniform draw (drawn on the host: the engine owns the
// generators).
struct SampleRowSpec {
  double u = 0.0;             // in [0, 1); unused when greedy
  float temperature = 0.0f;   // <= 0: greedy
  float top_p = 1.0f;         // >= 1: off
  float min_p = 0.0f;         // <= 0: off
  int32_t top_k = 0;          // <= 0: off
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t reserved = 0;
};

struct PenaltyRowEntry {
  int32_t row = 0;
  int32_t token_id = 0;
  int32_t output_count = 0;  // occurrences in the output; 0: seen in the prompt only
};

// SampleRows' bound on the candidates it sorts in shared memory.
constexpr int kSampleMaxCandidates = 2048;

// status values.
constexpr int32_t kSamplePicked = 0;
constexpr int32_t kSampleNeedsHost = 1;

namespace detail {
cudaError_t LaunchApplyPenaltiesSaving(float* logits, int64_t ld, const SampleRowSpec* specs,
                                       const PenaltyRowEntry* entries, int num_entries,
                                       float* saved, cudaStream_t stream);
cudaError_t LaunchRestorePenalties(float* logits, int64_t ld, const PenaltyRowEntry* entries,
                                   int num_entries, const float* saved, cudaStream_t stream);
cudaError_t LaunchSampleRows(const float* logits, int64_t ld, int num_rows, int vocab,
                             const SampleRowSpec* specs, int32_t* token_ids, int32_t* status,
                             cudaStream_t stream);
cudaError_t LaunchChosenLogits(const float* logits, int64_t ld, int num_rows,
                               const int32_t* token_ids, float* out, cudaStream_t stream);
}  // namespace detail
}  // namespace tandem::cuda

#ifndef __CUDACC__
#include "common/status.h"

namespace tandem::cuda {

// Errors: InvalidArgument (negative sizes, ld < vocab, null pointers), Internal (CUDA). Token ids
// and rows of the entries are not checked here (the host builds them in range).
Status ApplyPenaltiesSaving(float* logits, int64_t ld, const SampleRowSpec* specs,
                            const PenaltyRowEntry* entries, int num_entries, float* saved,
                            cudaStream_t stream);
Status RestorePenalties(float* logits, int64_t ld, const PenaltyRowEntry* entries, int num_entries,
                        const float* saved, cudaStream_t stream);
Status SampleRows(const float* logits, int64_t ld, int num_rows, int vocab,
                  const SampleRowSpec* specs, int32_t* token_ids, int32_t* status,
                  cudaStream_t stream);
Status ChosenLogits(const float* logits, int64_t ld, int num_rows, const int32_t* token_ids,
                    float* out, cudaStream_t stream);

}  // namespace tandem::cuda
#endif
