// cpu::ArgMax equals std::max_element on every ISA the CPU has: lengths around the vector widths,
// ties (the first wins), -0 and +0, -inf rows, NaNs anywhere.
#include "kernels/cpu/argmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/matmul.h"

namespace tandem::cpu {
namespace {

TEST(ArgMax, EqualsMaxElementOnEveryIsa) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-10, 10);
  std::vector<std::vector<float>> rows;
  for (const int n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 100, 151936}) {
    std::vector<float> r(n);
    for (float& x : r) x = u(rng);
    rows.push_back(r);
    std::vector<float> ties = r;  // the maximum at several places, the first not in lane 0
    const float top = *std::max_element(r.begin(), r.end()) + 1.0f;
    for (int i = n / 3; i < n; i += std::max(1, n / 4)) ties[i] = top;
    rows.push_back(ties);
    rows.push_back(std::vector<float>(n, -std::numeric_limits<float>::infinity()));
    std::vector<float> with_nan = r;
    with_nan[n / 2] = NAN;
    rows.push_back(with_nan);
    std::vector<float> nan_last = r;
    nan_last[n - 1] = NAN;
    rows.push_back(nan_last);
  }
  rows.push_back({-0.0f, 0.0f, -1.0f, 0.0f});
  rows.push_back({-1.0f, 0.0f, -0.0f, -2.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f});
  int isas = 0;
  for (const LinearIsa isa : {LinearIsa::kScalar, LinearIsa::kAvx2, LinearIsa::kAvx512}) {
    if (!SetLinearIsaForTesting(isa)) continue;
    ++isas;
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      ASSERT_EQ(ArgMax(r.data(), static_cast<int64_t>(r.size())), std::max_element(r.begin(), r.end()) - r.begin())
          << LinearIsaName(isa) << " row " << i << " of length " << r.size();
    }
  }
  SetLinearIsaForTesting(LinearIsa::kAuto);
  EXPECT_GE(isas, 1);
}

}  // namespace
}  // namespace tandem::cpu
