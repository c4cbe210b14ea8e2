#include "kernels/cpu/log_softmax.h"

#include <algorithm>
#include <cmath>

namespace tandem::cpu {

void LogSoftmax(const float* logits, int n, float* out) {
  if (n <= 0) return;
  float max_v = logits[0];
  for (int i = 1; i < n; ++i) max_v = std::max(max_v, logits[i]);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_v);
  const double lse = max_v + std::log(sum);
  for (int i = 0; i < n; ++i) out[i] = static_cast<float>(logits[i] - lse);
}

int Argmax(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

std::vector<std::pair<int, float>> TopK(const float* x, int n, int k) {
  k = std::max(0, std::min(k, n));
  std::vector<int> idx(n);
  for (int i = 0; i < n; ++i) idx[i] = i;
  auto better = [x](int a, int b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  std::vector<std::pair<int, float>> top(k);
  for (int i = 0; i < k; ++i) top[i] = {idx[i], x[idx[i]]};
  return top;
}

}  // namespace tandem::cpu
