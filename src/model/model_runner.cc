// The host fallbacks of ModelRunner::Execute and GetDeviceMemoryInfo (model_runner.h).
#include "model/model_runner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/argmax.h"
#include "kernels/cpu/thread_pool.h"

namespace tandem {

Status ValidateForwardBatch(const ForwardBatch& batch, const ModelConfig& config, int block_size,
                            int num_blocks) {
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SequenceSlice& seq = batch.seqs[s];
    const int64_t n = static_cast<int64_t>(seq.token_ids.size());
    if (n == 0) return Err(StatusCode::kInvalidArgument, "seq {}: no tokens in the slice", s);
    if (seq.start_pos < 0) {
      return Err(StatusCode::kInvalidArgument, "seq {}: negative start_pos {}", s, seq.start_pos);
    }
    const int64_t end = static_cast<int64_t>(seq.start_pos) + n;
    if (end > config.max_position_embeddings) {
      return Err(StatusCode::kInvalidArgument,
                 "seq {}: positions up to {} exceed max_position_embeddings {}", s, end - 1,
                 config.max_position_embeddings);
    }
    for (int32_t id : seq.token_ids) {
      if (id < 0 || id >= config.vocab_size) {
        return Err(StatusCode::kInvalidArgument, "seq {}: token id {} outside the vocab [0, {})",
                   s, id, config.vocab_size);
      }
    }
    const int64_t blocks_needed = (end + block_size - 1) / block_size;
    if (static_cast<int64_t>(seq.block_table.size()) < blocks_needed) {
      return Err(StatusCode::kInvalidArgument,
                 "seq {}: block table has {} blocks, positions [0, {}) need {} of {} tokens", s,
                 seq.block_table.size(), end, blocks_needed, block_size);
    }
    for (int64_t b = 0; b < blocks_needed; ++b) {
      const int32_t id = seq.block_table[b];
      if (id < 0 || id >= num_blocks) {
        return Err(StatusCode::kInvalidArgument, "seq {}: block id {} outside the pool [0, {})", s,
                   id, num_blocks);
      }
    }
  }
  return Status::Ok();
}

ArgmaxSample PickArgmax(std::span<const float> logits, int num_logprobs) {
  return PickToken(logits, num_logprobs, nullptr);
}

ArgmaxSample PickToken(std::span<const float> logits, int num_logprobs, const PickSpec* spec) {
  ArgmaxSample s;
  // The largest logit; the first (lowest id) of equal maxima, as std::max_element (vectorized).
  const auto best = logits.begin() + cpu::ArgMax(logits.data(), static_cast<int64_t>(logits.size()));
  s.token_id = static_cast<int32_t>(best - logits.begin());
  if (spec != nullptr && (spec->sample.temperature > 0.0f || spec->has_penalties() || spec->has_mask())) {
    std::vector<float> row(logits.begin(), logits.end());
    if (spec->has_penalties()) {
      cpu::ApplyPenaltyEntries(row, spec->penalties, spec->repetition_penalty,
                               spec->frequency_penalty, spec->presence_penalty);
    }
    if (spec->has_mask()) cpu::ApplyTokenBitmask(row, spec->allowed);
    s.token_id = cpu::SampleWithUniform(row, spec->sample, spec->u);
  }
  if (num_logprobs < 0) return s;
  // log_softmax in double: logit - max - log(sum exp(logit - max)).
  const double mx = *best;
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  s.logprob = static_cast<float>(static_cast<double>(logits[s.token_id]) - lse);
  const size_t k = std::min(static_cast<size_t>(num_logprobs), logits.size());
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                    [&](int32_t a, int32_t b) {
                      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                    });
  for (size_t i = 0; i < k; ++i) {
    s.top.emplace_back(ids[i], static_cast<float>(static_cast<double>(logits[ids[i]]) - lse));
  }
  return s;
}

Status ModelRunner::Execute(const ForwardBatch& batch, ForwardOutput* out) {
  out->logits.clear();
  out->samples.clear();
  const int vocab = config().vocab_size;
  ForwardBatch b = batch;
  bool any_argmax = false;
  for (SequenceSlice& s : b.seqs) {
    if (s.logits != SequenceSlice::Logits::kArgmax) continue;
    if (s.num_logprobs > vocab) {
      return Err(StatusCode::kInvalidArgument, "num_logprobs {} exceeds the vocabulary of {}",
                 s.num_logprobs, vocab);
    }
    s.logits = SequenceSlice::Logits::kLast;
    any_argmax = true;
  }
  if (!any_argmax) {
    TANDEM_RETURN_IF_ERROR(Forward(batch, &out->logits));
    PreparePicks(batch);
    return Status::Ok();
  }
  std::vector<float> all;
  TANDEM_RETURN_IF_ERROR(Forward(b, &all));
  PreparePicks(batch);  // a host runner's forward is done: nothing to overlap, the masks now
  // Split the rows: kArgmax slices' rows are picked here (in parallel on the CPU pool: each is a
  // pass over the vocabulary), the others are returned.
  size_t row = 0;
  const size_t v = static_cast<size_t>(vocab);
  std::vector<std::pair<size_t, const SequenceSlice*>> picks;  // (row, slice)
  for (const SequenceSlice& s : batch.seqs) {
    size_t rows = 0;
    if (s.logits == SequenceSlice::Logits::kLast) rows = 1;
    if (s.logits == SequenceSlice::Logits::kAll) rows = s.token_ids.size();
    if (s.logits == SequenceSlice::Logits::kArgmax) {
      picks.emplace_back(row, &s);
      ++row;
      continue;
    }
    out->logits.insert(out->logits.end(), all.begin() + static_cast<std::ptrdiff_t>(row * v),
                       all.begin() + static_cast<std::ptrdiff_t>((row + rows) * v));
    row += rows;
  }
  out->samples.resize(picks.size());
  cpu::ParallelFor(static_cast<int>(picks.size()), [&](int i) {
    const SequenceSlice& s = *picks[i].second;
    out->samples[i] = PickToken(std::span<const float>(all.data() + picks[i].first * v, v), s.num_logprobs, s.pick);
  });
  return Status::Ok();
}

Result<DeviceMemoryInfo> ModelRunner::GetDeviceMemoryInfo() {
  return Status(StatusCode::kUnimplemented, "this model runner computes in host memory");
}

Status CheckKvBlockCopies(std::span<const KvBlockCopy> copies, int num_blocks) {
  for (const KvBlockCopy& c : copies) {
    if (c.block_id < 0 || c.block_id >= num_blocks || c.host == nullptr) {
      return Err(StatusCode::kInvalidArgument, "CopyKvBlocks: block {} of {}, host {}", c.block_id,
                 num_blocks, static_cast<const void*>(c.host));
    }
  }
  return Status::Ok();
}

Status ModelRunner::StartKvOnboard(std::span<const KvBlockCopy>, uint64_t*) {
  return Status(StatusCode::kUnimplemented, "StartKvOnboard: this runner copies KV blocks synchronously");
}

Status ModelRunner::StartKvCopiesByLayer(std::span<const KvBlockCopy>) {
  return Status(StatusCode::kUnimplemented, "StartKvCopiesByLayer: this runner copies KV blocks synchronously");
}

Status ModelRunner::PollKvOnboard(uint64_t, bool, bool*, double*) {
  return Status(StatusCode::kUnimplemented, "PollKvOnboard: this runner copies KV blocks synchronously");
}

Status ModelRunner::CopyKvBlocks(std::span<const KvBlockCopy> copies) {
  const KVCacheLayout layout = kv_cache_layout();
  if (layout.device_id >= 0) {
    return Status(StatusCode::kUnimplemented, "CopyKvBlocks: this runner's KV pool is device memory");
  }
  TANDEM_RETURN_IF_ERROR(CheckKvBlockCopies(copies, layout.num_blocks));
  const size_t bb = layout.block_bytes;
  for (const KvBlockCopy& c : copies) {
    for (size_t l = 0; l < layout.layer_base.size(); ++l) {
      std::byte* pool = static_cast<std::byte*>(layout.layer_base[l]) + static_cast<size_t>(c.block_id) * bb;
      if (c.to_host) std::memcpy(c.host + l * bb, pool, bb);
      else std::memcpy(pool, c.host + l * bb, bb);
    }
  }
  return Status::Ok();
}

void* ModelRunner::AllocateHostStaging(size_t bytes) { return std::malloc(bytes); }

void ModelRunner::FreeHostStaging(void* p) { std::free(p); }

}  // namespace tandem
