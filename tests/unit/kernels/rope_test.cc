// RoPE: inv_freq (default, linear, llama3) against the transformers formulas in double, and the
// rotation against a plain loop.
#include "kernels/cpu/rope.h"

#include <cmath>
#include <numbers>
#include <random>

#include <gtest/gtest.h>

namespace tandem::cpu {
namespace {

TEST(RopeTest, DefaultInvFreq) {
  RopeParams p;
  p.theta = 1e6;
  const auto f = RopeInvFreq(64, p);
  ASSERT_EQ(f.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    const double want = 1.0 / std::pow(1e6, 2.0 * i / 64);
    EXPECT_NEAR(f[i], want, 2e-7 * want) << i;
  }
  EXPECT_EQ(f[0], 1.0f);
}

TEST(RopeTest, LinearDividesByFactor) {
  RopeParams p;
  p.theta = 10000;
  const auto base = RopeInvFreq(128, p);
  p.type = "linear";
  p.factor = 4.0;
  const auto scaled = RopeInvFreq(128, p);
  for (size_t i = 0; i < base.size(); ++i) EXPECT_FLOAT_EQ(scaled[i], base[i] / 4.0f);
}

TEST(RopeTest, Llama3Regimes) {
  RopeParams p;
  p.theta = 500000;
  const auto base = RopeInvFreq(128, p);
  p.type = "llama3";
  p.factor = 8;
  p.low_freq_factor = 1;
  p.high_freq_factor = 4;
  p.original_max_position_embeddings = 8192;
  const auto f = RopeInvFreq(128, p);
  int high = 0, low = 0, medium = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const double inv = base[i];
    const double wavelen = 2 * std::numbers::pi / inv;
    double want;
    if (wavelen < 8192.0 / 4) {
      want = inv;
      ++high;
    } else if (wavelen > 8192.0 / 1) {
      want = inv / 8;
      ++low;
    } else {
      const double s = (8192.0 / wavelen - 1) / (4 - 1);
      want = (1 - s) * inv / 8 + s * inv;
      ++medium;
    }
    EXPECT_NEAR(f[i], want, 1e-6 * want) << i;
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(medium, 0);
}

TEST(RopeTest, RotationMatchesPlainLoop) {
  const int T = 3, H = 2, D = 8;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(T * H * D);
  for (float& v : x) v = u(rng);
  RopeParams p;
  p.theta = 100;
  const auto inv = RopeInvFreq(D, p);
  const std::vector<int32_t> pos = {0, 5, 3000};
  std::vector<float> y = x;
  ApplyRope(y.data(), T, H, D, pos.data(), inv.data());
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      const float* a = &x[(t * H + h) * D];
      const float* b = &y[(t * H + h) * D];
      for (int i = 0; i < D / 2; ++i) {
        const double ang = double(float(pos[t]) * inv[i]);
        EXPECT_NEAR(b[i], a[i] * std::cos(ang) - a[i + D / 2] * std::sin(ang), 1e-6);
        EXPECT_NEAR(b[i + D / 2], a[i + D / 2] * std::cos(ang) + a[i] * std::sin(ang), 1e-6);
        if (pos[t] == 0) {
          EXPECT_EQ(b[i], a[i]);
          EXPECT_EQ(b[i + D / 2], a[i + D / 2]);
        }
      }
    }
  }
}

// RopeCosSin + ApplyRopeCosSin: ApplyRope's values bit for bit.
TEST(RopeTest, CosSinTablesEqualApplyRope) {
  const int T = 70, H = 3, D = 64;
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> x(T * H * D);
  for (float& v : x) v = u(rng);
  RopeParams p;
  p.theta = 1e6;
  const auto inv = RopeInvFreq(D, p);
  std::vector<int32_t> pos(T);
  for (int t = 0; t < T; ++t) pos[t] = t * 37 % 5000;
  std::vector<float> a = x, b = x, cos(T * D / 2), sin(T * D / 2);
  ApplyRope(a.data(), T, H, D, pos.data(), inv.data());
  RopeCosSin(pos.data(), T, D, inv.data(), cos.data(), sin.data());
  ApplyRopeCosSin(b.data(), T, H, D, cos.data(), sin.data());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace tandem::cpu
