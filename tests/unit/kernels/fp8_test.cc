// FP8 E4M3 conversions (kernels/cpu/fp8.h) against NVIDIA's host converters in cuda_fp8.h
// (__nv_cvt_fp8_to_halfraw, __nv_cvt_float_to_fp8 with __NV_SATFINITE), built where the CUDA
// toolkit is; the properties the OCP OFP8 spec fixes (the largest finite value, NaN, the smallest
// subnormal) and the block-scale arithmetic everywhere.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/fp8.h"

#ifdef TANDEM_TEST_CUDA_FP8_REFERENCE
#include <cuda_fp8.h>
#endif

namespace tandem::cpu {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(Fp8E4M3Test, SpecValues) {
  EXPECT_EQ(Fp8E4M3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0xfe), -448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(Fp8E4M3ToFloat(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(Fp8E4M3ToFloat(0x38), 1.0f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0x7f)));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0xff)));
  EXPECT_EQ(Bits(Fp8E4M3ToFloat(0x80)), Bits(-0.0f));
  EXPECT_EQ(FloatToFp8E4M3(std::nanf("")), 0x7f);
  EXPECT_EQ(FloatToFp8E4M3(INFINITY), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(-1e9f), 0xfe);
}

// Every finite code decodes to a value that encodes back to it, and the codes are ordered.
TEST(Fp8E4M3Test, EveryFiniteCodeRoundTripsInOrder) {
  float prev = -1.0f;
  for (int c = 0; c < 0x7f; ++c) {
    const float v = Fp8E4M3ToFloat(static_cast<uint8_t>(c));
    EXPECT_EQ(FloatToFp8E4M3(v), c) << v;
    EXPECT_EQ(FloatToFp8E4M3(-v), c | 0x80) << v;
    EXPECT_GT(v, prev) << c;
    prev = v;
  }
}

#ifdef TANDEM_TEST_CUDA_FP8_REFERENCE
float CudaDecode(uint8_t c) {
  __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), __NV_E4M3);
  return static_cast<float>(__half(h));
}

uint8_t CudaEncode(float f) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3));
}

TEST(Fp8E4M3Test, DecodeEqualsCudaForAll256Codes) {
  for (int c = 0; c < 256; ++c) {
    const float ours = Fp8E4M3ToFloat(static_cast<uint8_t>(c)), cuda = CudaDecode(static_cast<uint8_t>(c));
    if (std::isnan(cuda)) {
      EXPECT_TRUE(std::isnan(ours)) << c;
    } else {
      EXPECT_EQ(Bits(ours), Bits(cuda)) << c;
    }
  }
}

// Ties, the subnormal/normal boundary, saturation and random floats over the whole range.
TEST(Fp8E4M3Test, EncodeEqualsCudaSatfinite) {
  std::vector<float> xs = {0.0f, -0.0f, 448.0f, 449.0f, 463.9f, 464.0f, 480.0f, 1e30f, -1e30f,
                           INFINITY, -INFINITY, 1.0625f, 1.1875f, 0x1p-10f, 0x1.8p-9f, 0x1.4p-9f,
                           0x1p-6f - 0x1p-11f, 0x1p-6f - 0x1p-10f, 0x1p-6f, 1e-30f};
  for (int c = 0; c < 0x7e; ++c) {  // midpoints between neighbours and one float either side
    const float a = Fp8E4M3ToFloat(static_cast<uint8_t>(c)), b = Fp8E4M3ToFloat(static_cast<uint8_t>(c + 1));
    const float mid = (a + b) / 2;
    xs.insert(xs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), -mid});
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> expo(-14.0f, 10.0f), unit(-1.0f, 1.0f);
  for (int k = 0; k < 200000; ++k) xs.push_back(unit(rng) * std::exp2(expo(rng)));
  int mismatches = 0;
  for (float x : xs) {
    if (FloatToFp8E4M3(x) != CudaEncode(x) && ++mismatches <= 10) {
      ADD_FAILURE() << std::hexfloat << x << ": ours " << int(FloatToFp8E4M3(x)) << " cuda " << int(CudaEncode(x));
    }
  }
  EXPECT_EQ(mismatches, 0);
}
#else
TEST(Fp8E4M3Test, DecodeEqualsCudaForAll256Codes) { GTEST_SKIP() << "built without the CUDA toolkit's cuda_fp8.h"; }
#endif

TEST(Fp8E4M3Test, BlockDequantizationUsesEachBlocksScale) {
  // [3, 5] in blocks of [2, 2]: scales [2, 3]; ragged last row and column blocks.
  const int64_t rows = 3, cols = 5;
  std::vector<uint8_t> q(rows * cols);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>(0x30 + i);
  const float scales[6] = {1.0f, 2.0f, 4.0f, 0.5f, 0.25f, 8.0f};
  std::vector<float> out(rows * cols);
  DequantizeFp8E4M3(q.data(), rows, cols, scales, 2, 2, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      EXPECT_EQ(out[r * cols + c], Fp8E4M3ToFloat(q[r * cols + c]) * scales[(r / 2) * 3 + c / 2]) << r << "," << c;
    }
  }
}

// Per-row quantization: the row's largest magnitude maps to +-448 exactly, every element is within
// half an e4m3 step (relative 2^-4) of the original, and an all-zero row stays zero.
TEST(Fp8E4M3Test, PerRowQuantizationBoundsTheError) {
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.0f, 0.02f);
  const int64_t rows = 8, cols = 257;
  std::vector<float> w(rows * cols), back(rows * cols), scales(rows);
  for (float& x : w) x = n(rng);
  for (int64_t c = 0; c < cols; ++c) w[5 * cols + c] = 0.0f;
  std::vector<uint8_t> q(w.size());
  QuantizeFp8E4M3PerRow(w.data(), rows, cols, q.data(), scales.data());
  DequantizeFp8E4M3(q.data(), rows, cols, scales.data(), 1, cols, back.data());
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
    for (int64_t c = 0; c < cols; ++c) {
      const float x = w[r * cols + c], y = back[r * cols + c];
      // normal range: relative half-step 2^-4; below it the absolute subnormal half-step
      EXPECT_LE(std::fabs(x - y), std::max(std::fabs(x) * 0x1p-4f, scales[r] * 0x1p-10f) * 1.0001f) << r << "," << c;
      if (std::fabs(x) == amax && amax > 0) {
        EXPECT_EQ(std::fabs(Fp8E4M3ToFloat(q[r * cols + c])), 448.0f);
      }
    }
  }
  EXPECT_EQ(scales[5], 1.0f);
  for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(back[5 * cols + c], 0.0f);
}

}  // namespace
}  // namespace tandem::cpu
