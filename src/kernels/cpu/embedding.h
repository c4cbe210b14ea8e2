// Embedding lookup: out[i, :] = table[ids[i], :]. Ids must be valid (the caller checks).
#pragma once

#include <cstdint>

namespace tandem::cpu {

// ids: [num_tokens], table: [vocab, dim], out: [num_tokens, dim].
void Embedding(const int32_t* ids, int num_tokens, const float* table, int dim, float* out);

}  // namespace tandem::cpu
