#include "kernels/cpu/embedding.h"

#include <cstring>

namespace tandem::cpu {

void Embedding(const int32_t* ids, int num_tokens, const float* table, int dim, float* out) {
  for (int i = 0; i < num_tokens; ++i) {
    std::memcpy(out + static_cast<long>(i) * dim, table + static_cast<long>(ids[i]) * dim,
                sizeof(float) * dim);
  }
}

void Embedding(const int32_t* ids, int num_tokens, const WeightMatrix& table, float* out) {
  for (int i = 0; i < num_tokens; ++i) {
    WeightRowsToFloat(table, ids[i], 1, out + static_cast<long>(i) * table.cols);
  }
}

}  // namespace tandem::cpu
