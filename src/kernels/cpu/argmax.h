// The index of the largest of n floats, as std::max_element returns it (the first of equal maxima;
// -0 and +0 equal), vectorized for the picks over a vocabulary of logits (issue 29): AVX-512 or
// AVX2 as matmul.h's ActiveLinearIsa(), else std::max_element. A row holding a NaN goes to
// std::max_element too, so the result is always std::max_element's.
#pragma once

#include <cstdint>

namespace tandem::cpu {

// n >= 1.
int64_t ArgMax(const float* x, int64_t n);

}  // namespace tandem::cpu
