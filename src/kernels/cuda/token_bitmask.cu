#include <cmath>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/token_bitmask.h"

namespace tandem::cuda::detail {
namespace {

constexpr int kThreads = 256;

// Grid (ceil(vocab / 256), num_rows): thread t of block b handles token b * 256 + t.
__global__ void ApplyTokenBitmaskKernel(float* logits, int64_t ld, int vocab, const uint32_t* masks,
                                        int mask_words, const int32_t* mask_of_row) {
  const int row = blockIdx.y;
  const int m = mask_of_row[row];
  if (m < 0) return;
  const int t = blockIdx.x * kThreads + threadIdx.x;
  if (t >= vocab) return;
  const int word = t >> 5;
  const bool allowed =
      word < mask_words && ((masks[static_cast<int64_t>(m) * mask_words + word] >> (t & 31)) & 1u);
  if (!allowed) logits[row * ld + t] = -INFINITY;
}

}  // namespace

cudaError_t LaunchApplyTokenBitmask(float* logits, int64_t ld, int num_rows, int vocab,
                                    const uint32_t* masks, int mask_words,
                                    const int32_t* mask_of_row, cudaStream_t stream) {
  if (num_rows == 0 || vocab == 0) return cudaSuccess;
  const dim3 grid((vocab + kThreads - 1) / kThreads, num_rows);
  TANDEM_LAUNCH(ApplyTokenBitmaskKernel, grid, kThreads, 0, stream, logits, ld, vocab, masks,
                mask_words, mask_of_row);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::detail
