// Embedding lookup: out[i, :] = table[ids[i], :]. Ids must be valid (the caller checks).
#pragma once

#include <cstdint>

#include "kernels/cpu/weight_matrix.h"

namespace tandem::cpu {

// ids: [num_tokens], table: [vocab, dim], out: [num_tokens, dim].
void Embedding(const int32_t* ids, int num_tokens, const float* table, int dim, float* out);

// The same from a table [vocab, dim] in bf16, f16 or fp32 (rows converted exactly to fp32).
void Embedding(const int32_t* ids, int num_tokens, const WeightMatrix& table, float* out);

}  // namespace tandem::cpu
