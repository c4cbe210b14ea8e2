#include "engine/sampler.h"

#include "kernels/cpu/argmax.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>
#include <vector>

namespace tandem {

void ApplyPenalties(std::span<float> logits, std::span<const int32_t> prompt_ids,
                    std::span<const int32_t> output_ids, const SamplingParams& params) {
  const int vocab = static_cast<int>(logits.size());
  auto in_vocab = [vocab](int32_t id) { return id >= 0 && id < vocab; };
  if (params.repetition_penalty != 1.0f) {
    const float r = params.repetition_penalty;
    std::vector<bool> seen(vocab, false);
    auto mark = [&](std::span<const int32_t> ids) {
      for (int32_t id : ids) {
        if (!in_vocab(id) || seen[id]) continue;
        seen[id] = true;
        logits[id] = logits[id] > 0 ? logits[id] / r : logits[id] * r;
      }
    };
    mark(prompt_ids);
    mark(output_ids);
  }
  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t id : output_ids) {
      if (in_vocab(id)) ++counts[id];
    }
    for (const auto& [id, c] : counts) {
      logits[id] -= static_cast<float>(c) * params.frequency_penalty + params.presence_penalty;
    }
  }
}

int32_t ArgMax(std::span<const float> logits) {
  // The first of equal maxima, as the scalar loop `if (l[i] > l[best]) best = i` (std::max_element):
  // that loop's load of l[best] chained every step to the last (4 ns a logit, 0.6 ms a Qwen3 row).
  if (logits.empty()) return 0;
  return static_cast<int32_t>(cpu::ArgMax(logits.data(), static_cast<int64_t>(logits.size())));
}

cpu::SampleSpec ToSampleSpec(const SamplingParams& params) {
  cpu::SampleSpec spec;
  spec.temperature = params.temperature;
  spec.top_p = params.top_p;
  spec.top_k = params.top_k;
  spec.min_p = params.min_p;
  return spec;
}

int32_t SampleTokenWithUniform(std::span<const float> logits, const SamplingParams& params,
                               double u) {
  return cpu::SampleWithUniform(logits, ToSampleSpec(params), u);
}

int32_t SampleToken(std::span<const float> logits, const SamplingParams& params,
                    std::mt19937_64& generator) {
  if (params.temperature <= 0.0f) return ArgMax(logits);  // greedy: no draw
  return SampleTokenWithUniform(logits, params, UniformDouble(generator));
}

TokenLogprob ComputeLogprobs(std::span<const float> logits, int32_t token_id, int top_k) {
  const int vocab = static_cast<int>(logits.size());
  const float max_logit = logits[ArgMax(logits)];
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max_logit);
  const double log_z = max_logit + std::log(sum);
  auto logprob = [&](int32_t id) { return static_cast<float>(logits[id] - log_z); };

  TokenLogprob out;
  out.token_id = token_id;
  out.logprob = logprob(token_id);
  const int k = std::min(std::max(top_k, 0), vocab);
  if (k > 0) {
    std::vector<int32_t> ids(vocab);
    std::iota(ids.begin(), ids.end(), 0);
    auto better = [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    };
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), better);
    for (int i = 0; i < k; ++i) out.top.emplace_back(ids[i], logprob(ids[i]));
  }
  return out;
}

}  // namespace tandem
