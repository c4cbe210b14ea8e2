// Helpers over one row of logits: log-softmax (fp32 out, log-sum-exp accumulated in double),
// argmax (first index of the maximum, like torch.argmax) and top-k (best first, ties by index).
#pragma once

#include <utility>
#include <vector>

namespace tandem::cpu {

// logits, out: [n]; out may alias logits.
void LogSoftmax(const float* logits, int n, float* out);

// Index of the largest value; the lowest index among equals.
int Argmax(const float* x, int n);

// The k largest (index, value) pairs, largest first.
std::vector<std::pair<int, float>> TopK(const float* x, int n, int k);

}  // namespace tandem::cpu
