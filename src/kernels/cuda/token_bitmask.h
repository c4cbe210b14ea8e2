// Structured outputs on the GPU: a token bitmask applied to rows of fp32 logits before the
// sampler (sampling_filter.h), so that a grammar's disallowed tokens can never be picked.
//   ApplyTokenBitmask: for each row r with mask_of_row[r] = m >= 0 and each token t < vocab,
//     logits[r * ld + t] = -inf unless bit t % 32 of masks[m * mask_words + t / 32] is set
//     (tokens past mask_words * 32 are disallowed: the tokenizer's vocabulary may be shorter than
//     the model's). Rows with mask_of_row[r] < 0 are untouched.
//   Shapes: logits [num_rows, ld >= vocab]; masks [num_masks, mask_words] uint32; mask_of_row
//   [num_rows]. Device pointers; asynchronous on `stream`; no allocation (graph-safe).
// The mask format is the engine's (grammar::TokenMasker words, engine/grammar_state.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {
namespace detail {
cudaError_t LaunchApplyTokenBitmask(float* logits, int64_t ld, int num_rows, int vocab,
                                    const uint32_t* masks, int mask_words,
                                    const int32_t* mask_of_row, cudaStream_t stream);
}  // namespace detail
}  // namespace tandem::cuda

#ifndef __CUDACC__
#include "common/status.h"

namespace tandem::cuda {

// Errors: InvalidArgument (negative sizes, ld < vocab, null pointers with rows), Internal (CUDA).
// The indices in mask_of_row are not checked here (the host builds them in range).
Status ApplyTokenBitmask(float* logits, int64_t ld, int num_rows, int vocab, const uint32_t* masks,
                         int mask_words, const int32_t* mask_of_row, cudaStream_t stream);

}  // namespace tandem::cuda
#endif
