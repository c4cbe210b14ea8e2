#include "kernels/cuda/token_bitmask.h"

#include "kernels/cuda/cuda_check.h"

namespace tandem::cuda {

Status ApplyTokenBitmask(float* logits, int64_t ld, int num_rows, int vocab, const uint32_t* masks,
                         int mask_words, const int32_t* mask_of_row, cudaStream_t stream) {
  if (num_rows < 0 || vocab < 0 || mask_words < 0 || ld < vocab ||
      (num_rows > 0 && (logits == nullptr || masks == nullptr || mask_of_row == nullptr))) {
    return Err(StatusCode::kInvalidArgument,
               "ApplyTokenBitmask: num_rows {}, vocab {}, ld {}, mask_words {}, or null pointers",
               num_rows, vocab, ld, mask_words);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchApplyTokenBitmask(logits, ld, num_rows, vocab, masks,
                                                              mask_words, mask_of_row, stream));
  return Status::Ok();
}

}  // namespace tandem::cuda
