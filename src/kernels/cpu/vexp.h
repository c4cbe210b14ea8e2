// exp of floats, vectorized and bit for bit glibc's expf (issue 29): attention's softmax and SwiGLU
// call exp millions of times a prefill, and glibc's scalar expf showed at ~10% of a 512-token one.
//
// glibc's expf (since 2.27; ARM's optimized-routines algorithm) evaluates in double: k = round(x * 32 /
// ln 2), r = x * 32 / ln 2 - k, 2^(k/32) from a 32-entry table and the exponent bits, a degree-3
// polynomial in r, rounded once to float. On CPUs with FMA glibc runs its FMA build of it
// (__expf_fma); the AVX-512 and AVX2 code here does the same operations with the same fusions in
// double lanes (checked against glibc on every float in [-103.97, 88.72], the range where glibc takes
// that path; vectors holding anything else, NaN and infinities included, go to std::exp). Without
// AVX2 (matmul.h's ActiveLinearIsa) it is std::exp.
#pragma once

#include <cstdint>

namespace tandem::cpu {

// y[i] = std::exp(x[i]) for i in [0, n); y may alias x.
void Exp(const float* x, int64_t n, float* y);

}  // namespace tandem::cpu
