#include "kernels/cuda/embedding.h"

#include "kernels/cuda/cuda_check.h"

namespace tandem::cuda {

Status Embedding(const int32_t* ids, int num_tokens, const __nv_bfloat16* table, int vocab,
                 int dim, __nv_bfloat16* out, cudaStream_t stream) {
  if (num_tokens < 0 || dim < 0 || vocab <= 0) {
    return Err(StatusCode::kInvalidArgument, "Embedding: num_tokens {}, vocab {}, dim {}",
               num_tokens, vocab, dim);
  }
  if (num_tokens > 0 && dim > 0 && (ids == nullptr || table == nullptr || out == nullptr)) {
    return Err(StatusCode::kInvalidArgument, "Embedding: null pointer");
  }
  TANDEM_CUDA_RETURN_IF_ERROR(
      detail::LaunchEmbedding(ids, num_tokens, table, vocab, dim, out, stream));
  return Status::Ok();
}

}  // namespace tandem::cuda
