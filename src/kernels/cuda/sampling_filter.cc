#include "kernels/cuda/sampling_filter.h"

#include "kernels/cuda/cuda_check.h"

namespace tandem::cuda {

Status ApplyPenaltiesSaving(float* logits, int64_t ld, const SampleRowSpec* specs,
                            const PenaltyRowEntry* entries, int num_entries, float* saved,
                            cudaStream_t stream) {
  if (num_entries < 0 || (num_entries > 0 && (logits == nullptr || specs == nullptr ||
                                               entries == nullptr || saved == nullptr))) {
    return Err(StatusCode::kInvalidArgument, "ApplyPenaltiesSaving: {} entries, null pointers",
               num_entries);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(
      detail::LaunchApplyPenaltiesSaving(logits, ld, specs, entries, num_entries, saved, stream));
  return Status::Ok();
}

Status RestorePenalties(float* logits, int64_t ld, const PenaltyRowEntry* entries, int num_entries,
                        const float* saved, cudaStream_t stream) {
  if (num_entries < 0 ||
      (num_entries > 0 && (logits == nullptr || entries == nullptr || saved == nullptr))) {
    return Err(StatusCode::kInvalidArgument, "RestorePenalties: {} entries, null pointers",
               num_entries);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(
      detail::LaunchRestorePenalties(logits, ld, entries, num_entries, saved, stream));
  return Status::Ok();
}

Status SampleRows(const float* logits, int64_t ld, int num_rows, int vocab,
                  const SampleRowSpec* specs, int32_t* token_ids, int32_t* status,
                  cudaStream_t stream) {
  if (num_rows < 0 || vocab < 0 ||
      (num_rows > 0 && (vocab == 0 || ld < vocab || logits == nullptr || specs == nullptr ||
                        token_ids == nullptr || status == nullptr))) {
    return Err(StatusCode::kInvalidArgument,
               "SampleRows: num_rows {}, vocab {}, row stride {}, or null pointers", num_rows,
               vocab, ld);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(
      detail::LaunchSampleRows(logits, ld, num_rows, vocab, specs, token_ids, status, stream));
  return Status::Ok();
}

Status ChosenLogits(const float* logits, int64_t ld, int num_rows, const int32_t* token_ids,
                    float* out, cudaStream_t stream) {
  if (num_rows < 0 ||
      (num_rows > 0 && (logits == nullptr || token_ids == nullptr || out == nullptr))) {
    return Err(StatusCode::kInvalidArgument, "ChosenLogits: num_rows {}, null pointers", num_rows);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(
      detail::LaunchChosenLogits(logits, ld, num_rows, token_ids, out, stream));
  return Status::Ok();
}

}  // namespace tandem::cuda
