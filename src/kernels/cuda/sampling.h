// Sampling helpers on the GPU over fp32 logits rows (the CUDA twins of kernels/cpu/log_softmax.h):
//   LogSoftmax: out = x - (max + log(sum(exp(x - max)))), fp32 (the CPU op sums in double).
//   Argmax:     first index of the maximum (torch.argmax).
//   TopK:       the k largest (index, value) pairs, largest first, ties by lower index, as
//               cpu::TopK; k rounds of a block-wide arg-best over the row (fine for k up to ~64).
//   ArgmaxLogSumExp: one pass per row giving the argmax (lowest index on ties), the max and
//               lse = max + log(sum(exp(x - max))) (fp32, online rescaling), so the greedy token's
//               log-probability is max - lse without writing the log-softmax row. With a
//               workspace a row is split into chunks scanned by blocks of their own, whose
//               partials a second kernel merges (few rows of a 152k vocabulary: one block per row
//               is one SM's worth of expf, 86 us on an H200 at batch 1).
// One block per row otherwise. Device pointers; asynchronous on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {
namespace detail {
// x: [num_rows, n] row stride ldx; out: [num_rows, n] row stride ldo (may alias x).
cudaError_t LaunchLogSoftmax(const float* x, int64_t ldx, int num_rows, int n, float* out,
                             int64_t ldo, cudaStream_t stream);
// ids: [num_rows].
cudaError_t LaunchArgmax(const float* x, int64_t ldx, int num_rows, int n, int32_t* ids,
                         cudaStream_t stream);
// ids, max_values, lse: [num_rows]. chunks > 1 with a workspace of num_rows * chunks partials
// (kArgmaxLsePartBytes each): split rows; else one block per row.
constexpr int kMaxArgmaxLseChunks = 64;
constexpr size_t kArgmaxLsePartBytes = 16;
int ArgmaxLogSumExpChunks(int num_rows, int n, int num_sms);
cudaError_t LaunchArgmaxLogSumExp(const float* x, int64_t ldx, int num_rows, int n, int32_t* ids,
                                  float* max_values, float* lse, cudaStream_t stream, int chunks,
                                  void* workspace);
// ids, values: [num_rows, k].
cudaError_t LaunchTopK(const float* x, int64_t ldx, int num_rows, int n, int k, int32_t* ids,
                       float* values, cudaStream_t stream);
}  // namespace detail
}  // namespace tandem::cuda

#ifndef __CUDACC__
#include "common/status.h"

namespace tandem::cuda {

// Errors (all three): InvalidArgument (sizes, strides < n, null pointers; TopK: k outside [1, n]
// or above 1024), Internal (CUDA).
Status LogSoftmax(const float* x, int64_t ldx, int num_rows, int n, float* out, int64_t ldo,
                  cudaStream_t stream);
Status Argmax(const float* x, int64_t ldx, int num_rows, int n, int32_t* ids, cudaStream_t stream);
// workspace: ArgmaxLogSumExpWorkspaceBytes(num_rows) device bytes (16-byte aligned) to split
// the rows (same results; the lse's rounding may differ in the last bits), or null.
Status ArgmaxLogSumExp(const float* x, int64_t ldx, int num_rows, int n, int32_t* ids,
                       float* max_values, float* lse, cudaStream_t stream,
                       void* workspace = nullptr, size_t workspace_bytes = 0);
size_t ArgmaxLogSumExpWorkspaceBytes(int num_rows);
Status TopK(const float* x, int64_t ldx, int num_rows, int n, int k, int32_t* ids, float* values,
            cudaStream_t stream);

}  // namespace tandem::cuda
#endif
