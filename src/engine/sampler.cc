#include "engine/sampler.h"

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
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

namespace {

// Sorts ids by probability, descending (ties: lower id first).
void SortByProb(std::vector<int32_t>* ids, const std::vector<double>& p) {
  std::sort(ids->begin(), ids->end(), [&](int32_t a, int32_t b) {
    return p[a] != p[b] ? p[a] > p[b] : a < b;
  });
}

}  // namespace

int32_t SampleToken(std::span<const float> logits, const SamplingParams& params,
                    std::mt19937_64& generator) {
  const int vocab = static_cast<int>(logits.size());
  if (params.temperature <= 0.0f) return ArgMax(logits);

  // Unnormalized probabilities relative to the most likely token (p_max = 1).
  const float max_logit = logits[ArgMax(logits)];
  const double inv_t = 1.0 / params.temperature;
  std::vector<double> p(vocab);
  for (int i = 0; i < vocab; ++i) p[i] = std::exp((logits[i] - max_logit) * inv_t);

  // min-p: relative to p_max = 1.
  if (params.min_p > 0.0f) {
    for (double& x : p) {
      if (x < params.min_p) x = 0.0;
    }
  }
  std::vector<int32_t> cand;  // surviving ids
  cand.reserve(vocab);
  for (int i = 0; i < vocab; ++i) {
    if (p[i] > 0.0) cand.push_back(i);
  }
  bool sorted = false;
  if (params.top_k > 0 && params.top_k < static_cast<int>(cand.size())) {
    auto by_prob = [&](int32_t a, int32_t b) { return p[a] != p[b] ? p[a] > p[b] : a < b; };
    std::nth_element(cand.begin(), cand.begin() + params.top_k, cand.end(), by_prob);
    for (size_t i = params.top_k; i < cand.size(); ++i) p[cand[i]] = 0.0;
    cand.resize(params.top_k);
  }
  if (params.top_p < 1.0f) {
    double total = 0.0;
    for (int32_t id : cand) total += p[id];
    const double target = params.top_p * total;
    // Sorting the whole vocab is slow; the nucleus usually lies among the likely tokens, so try
    // those first and fall back to all candidates when their mass is short of the target.
    std::vector<int32_t> head;
    double head_mass = 0.0;
    for (int32_t id : cand) {
      if (p[id] >= 1e-4) {
        head.push_back(id);
        head_mass += p[id];
      }
    }
    std::vector<int32_t>& order = head_mass >= target ? head : cand;
    SortByProb(&order, p);
    sorted = true;
    double cum = 0.0;
    size_t keep = 0;
    while (keep < order.size()) {
      cum += p[order[keep++]];
      if (cum >= target) break;
    }
    for (size_t i = keep; i < order.size(); ++i) p[order[i]] = 0.0;
    order.resize(keep);
    if (&order != &cand) cand = std::move(order);
  }
  if (!sorted) std::sort(cand.begin(), cand.end());
  // Draw: walk the survivors (in a fixed order) until the cumulative mass passes u * total.
  double total = 0.0;
  for (int32_t id : cand) total += p[id];
  const double u = UniformDouble(generator) * total;
  double cum = 0.0;
  for (int32_t id : cand) {
    cum += p[id];
    if (u < cum) return id;
  }
  return cand.back();
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
