// Embedding lookup on the GPU: out[i, :] = table[ids[i], :], bf16 rows copied bit for bit
// (the CUDA twin of kernels/cpu/embedding.h).
//
// All pointers are device pointers; the op is asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {
namespace detail {
// ids: [num_tokens] int32; table: [vocab, dim] bf16 row-major; out: [num_tokens, dim] bf16.
// An id outside [0, vocab) gives a row of zeros (the caller validates ids on the host first).
cudaError_t LaunchEmbedding(const int32_t* ids, int num_tokens, const __nv_bfloat16* table,
                            int vocab, int dim, __nv_bfloat16* out, cudaStream_t stream);
}  // namespace detail
}  // namespace tandem::cuda

#ifndef __CUDACC__
#include "common/status.h"

namespace tandem::cuda {

// Errors: InvalidArgument (negative sizes, null pointers), Internal (a CUDA error).
Status Embedding(const int32_t* ids, int num_tokens, const __nv_bfloat16* table, int vocab,
                 int dim, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace tandem::cuda
#endif
