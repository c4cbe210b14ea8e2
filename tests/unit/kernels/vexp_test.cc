// cpu::Exp equals std::exp bit for bit on every ISA the CPU has: a stride through all 2^32 float bit
// patterns (both signs, subnormals, the edges of glibc's table path, infinities, NaNs) and vectors
// mixing in-range and special values, at lengths that leave tails.
#include "kernels/cpu/vexp.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/matmul.h"

namespace tandem::cpu {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

void ExpectSame(const std::vector<float>& x, const char* isa) {
  std::vector<float> y(x.size());
  Exp(x.data(), static_cast<int64_t>(x.size()), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = std::exp(x[i]);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(y[i])) << isa << " x " << x[i];
    } else {
      ASSERT_EQ(Bits(y[i]), Bits(want)) << isa << " x " << std::hexfloat << x[i] << " got " << y[i] << " want " << want;
    }
  }
}

TEST(Exp, EqualsStdExpBitForBitOnEveryIsa) {
  std::vector<float> stride;
  for (uint64_t u = 0; u <= 0xffffffffu; u += 997) {
    float f;
    const uint32_t b = static_cast<uint32_t>(u);
    std::memcpy(&f, &b, 4);
    stride.push_back(f);
  }
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> edges = {-0x1.9fe368p6f, -0x1.9fe36ap6f, -0x1.9fe366p6f, 0x1.62e42ep6f, 0x1.62e430p6f,
                              -inf, inf, NAN, 0.0f, -0.0f, 1.0f, -1.0f, 1e-45f, -1e-45f, 88.0f, -88.0f,
                              -87.5f, -103.0f, 0.5f, -0.693147f, 10.0f, -20.0f, 3.0f};
  // A dense run of softmax-like inputs (x - max <= 0) with one special value every 37: vectors with and
  // without a lane outside the table path.
  std::vector<float> mixed;
  for (int i = 0; i < 1000; ++i) mixed.push_back(i % 37 == 5 ? -inf : -0.013f * static_cast<float>(i));
  int isas = 0;
  for (const LinearIsa isa : {LinearIsa::kScalar, LinearIsa::kAvx2, LinearIsa::kAvx512}) {
    if (!SetLinearIsaForTesting(isa)) continue;
    ++isas;
    ExpectSame(stride, LinearIsaName(isa));
    ExpectSame(edges, LinearIsaName(isa));
    ExpectSame(mixed, LinearIsaName(isa));
    for (int n = 0; n < 40; ++n) ExpectSame(std::vector<float>(mixed.begin(), mixed.begin() + n), LinearIsaName(isa));
  }
  SetLinearIsaForTesting(LinearIsa::kAuto);
  EXPECT_GE(isas, 1);
}

}  // namespace
}  // namespace tandem::cpu
