#include "kernels/cpu/sample.h"

#include "kernels/cpu/argmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <ranges>
#include <unordered_map>

namespace tandem::cpu {

std::vector<PenaltyEntry> MakePenaltyEntries(std::span<const int32_t> prompt_ids,
                                             std::span<const int32_t> output_ids, int vocab_size) {
  std::vector<PenaltyEntry> entries;
  std::unordered_map<int32_t, size_t> index;  // token id -> entry
  index.reserve(prompt_ids.size() + output_ids.size());
  auto add = [&](int32_t id, int count) {
    if (id < 0 || id >= vocab_size) return;
    auto [it, fresh] = index.try_emplace(id, entries.size());
    if (fresh) entries.push_back({id, 0});
    entries[it->second].output_count += count;
  };
  for (int32_t id : prompt_ids) add(id, 0);
  for (int32_t id : output_ids) add(id, 1);
  return entries;
}

void ApplyPenaltyEntries(std::span<float> logits, std::span<const PenaltyEntry> entries,
                         float repetition_penalty, float frequency_penalty, float presence_penalty) {
  const bool repetition = repetition_penalty != 1.0f;
  const bool additive = frequency_penalty != 0.0f || presence_penalty != 0.0f;
  for (const PenaltyEntry& e : entries) {
    float& l = logits[e.token_id];
    if (repetition) l = l > 0 ? l / repetition_penalty : l * repetition_penalty;
    if (additive && e.output_count > 0) {
      const float sub = static_cast<float>(e.output_count) * frequency_penalty;
      l -= sub + presence_penalty;
    }
  }
}

namespace {

// The first of equal maxima (std::max_element's pick), vectorized (argmax.h).
int32_t ArgMax(std::span<const float> logits) {
  if (logits.empty()) return 0;
  return static_cast<int32_t>(::tandem::cpu::ArgMax(logits.data(), static_cast<int64_t>(logits.size())));
}

// Sorts ids by probability, descending (ties: lower id first).
void SortByProb(std::vector<int32_t>* ids, const std::vector<double>& p) {
  std::sort(ids->begin(), ids->end(), [&](int32_t a, int32_t b) {
    return p[a] != p[b] ? p[a] > p[b] : a < b;
  });
}

// p of one logit (sample.h's rule), 0 under min-p.
double Prob(float logit, float max_logit, double inv_t, float min_p) {
  const double x = std::exp((logit - max_logit) * inv_t);
  return min_p > 0.0f && x < min_p ? 0.0 : x;
}

// The k best of `ids` by `better` (a strict total order; k <= ids.size()): a heap of the k best so
// far whose front is the worst of them, in one pass; returned in heap order.
template <typename Ids, typename Better>
std::vector<int32_t> KBest(const Ids& ids, size_t k, Better better) {
  std::vector<int32_t> best;
  best.reserve(k);
  for (const int32_t i : ids) {
    if (best.size() < k) {
      best.push_back(i);
      std::push_heap(best.begin(), best.end(), better);
    } else if (better(i, best.front())) {
      std::pop_heap(best.begin(), best.end(), better);
      best.back() = i;
      std::push_heap(best.begin(), best.end(), better);
    }
  }
  return best;
}

// Top-k's survivors without exp over the whole row (a Qwen3 row's 151,936 exps were ~1.2 ms of a
// sampled token): p is a non-decreasing function of d = float(logit - max), so the k best by p lie
// among the k best by d. One pass finds D, the k-th best d; p is computed for U = {d >= D} and for
// the best d below D, then min-p and top-k run on those exactly as on the whole row. Returns false
// (the caller takes the whole-row path) where p might not separate what d separates: a NaN logit,
// D so close to the max that distinct d may share a p (|D / T| < 2^-20: within that, exp rounds
// neighbouring arguments alike), or p(D) near underflow. Fills p (zeros elsewhere), cand (top-k
// applied: the k best, in (p desc, id asc) order; else the candidates in id order) and id_order.
bool TopKFromTheBest(std::span<const float> logits, float max_logit, double inv_t, const SampleSpec& spec,
                     std::vector<double>* p, std::vector<int32_t>* cand, bool* id_order) {
  const size_t n = logits.size();
  const size_t k = static_cast<size_t>(spec.top_k);
  if (spec.top_k <= 0 || k >= n) return false;
  auto d = [&](size_t i) { return logits[i] - max_logit; };
  // NaN first: the order below must be a strict total order.
  if (std::any_of(logits.begin(), logits.end(), [](float x) { return x != x; })) return false;
  // The k best by (d desc, id asc); the heap's front is the k-th.
  auto better_d = [&](int32_t a, int32_t b) {
    const float da = d(a), db = d(b);
    return da != db ? da > db : a < b;
  };
  const float dk = d(KBest(std::views::iota(int32_t{0}, static_cast<int32_t>(n)), k, better_d).front());
  const double xk = static_cast<double>(dk) * inv_t;
  if (!(xk > -700.0) || -xk < 0x1p-20) return false;
  // U in id order, and the best d below D.
  std::vector<int32_t> u;
  int32_t next = -1;
  for (size_t i = 0; i < n; ++i) {
    const float di = d(i);
    if (di >= dk) {
      u.push_back(static_cast<int32_t>(i));
    } else if (next < 0 || di > d(next)) {
      next = static_cast<int32_t>(i);
    }
  }
  auto prob = [&](int32_t i) { return Prob(logits[i], max_logit, inv_t, spec.min_p); };
  for (int32_t i : u) {
    (*p)[i] = prob(i);
    if ((*p)[i] > 0.0) cand->push_back(i);
  }
  const bool outside_passes = next >= 0 && prob(next) > 0.0;  // then more than k candidates
  if (outside_passes || cand->size() > k) {
    SortByProb(cand, *p);
    for (size_t i = k; i < cand->size(); ++i) (*p)[(*cand)[i]] = 0.0;
    cand->resize(k);
    *id_order = false;
  } else {
    *id_order = true;
  }
  return true;
}

}  // namespace

int32_t SampleWithUniform(std::span<const float> logits, const SampleSpec& spec, double u) {
  const int vocab = static_cast<int>(logits.size());
  if (spec.temperature <= 0.0f) return ArgMax(logits);

  // Unnormalized probabilities relative to the most likely token (p_max = 1).
  const float max_logit = logits[ArgMax(logits)];
  const double inv_t = 1.0 / spec.temperature;
  std::vector<double> p(vocab);
  std::vector<int32_t> cand;  // surviving ids
  bool sorted = false;  // by (p desc, id asc)
  bool id_order = true;  // cand is in id order (as built below) until top-k reorders it
  // The whole row where TopKFromTheBest cannot tell (it wrote nothing then).
  if (!TopKFromTheBest(logits, max_logit, inv_t, spec, &p, &cand, &id_order)) {
    cand.reserve(vocab);
    for (int i = 0; i < vocab; ++i) {
      p[i] = Prob(logits[i], max_logit, inv_t, spec.min_p);  // min-p: relative to p_max = 1
      if (p[i] > 0.0) cand.push_back(i);
    }
  }
  // (After TopKFromTheBest, cand is what top-k left, or it is in id order and top-k keeps it all.)
  if (spec.top_k > 0 && spec.top_k < static_cast<int>(cand.size()) && id_order) {
    // The k best by (p desc, id asc), a total order, so one set (nth_element over the vocabulary
    // took ~2 ms of a Qwen3 row). Then in that order, so that top-p sums them in a fixed order.
    auto better = [&](int32_t a, int32_t b) { return p[a] != p[b] ? p[a] > p[b] : a < b; };
    cand = KBest(cand, static_cast<size_t>(spec.top_k), better);
    SortByProb(&cand, p);
    id_order = false;
  }
  if (spec.top_p < 1.0f) {
    double total = 0.0;
    for (int32_t id : cand) total += p[id];
    const double target = spec.top_p * total;
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
  if (!sorted && !id_order) std::sort(cand.begin(), cand.end());
  // Draw: walk the survivors (in a fixed order) until the cumulative mass passes u * total.
  double total = 0.0;
  for (int32_t id : cand) total += p[id];
  const double x = u * total;
  double cum = 0.0;
  for (int32_t id : cand) {
    cum += p[id];
    if (x < cum) return id;
  }
  return cand.back();
}

void ApplyTokenBitmask(std::span<float> logits, std::span<const uint32_t> allowed) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  const size_t covered = std::min(logits.size(), allowed.size() * 32);
  for (size_t w = 0; w * 32 < covered; ++w) {
    const uint32_t bits = allowed[w];
    if (bits == 0xFFFFFFFFu) continue;
    const size_t end = std::min(covered, w * 32 + 32);
    for (size_t t = w * 32; t < end; ++t) {
      if (!(bits >> (t % 32) & 1u)) logits[t] = kMasked;
    }
  }
  for (size_t t = covered; t < logits.size(); ++t) logits[t] = kMasked;
}

}  // namespace tandem::cpu
