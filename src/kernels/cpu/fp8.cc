#include "kernels/cpu/fp8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tandem::cpu {

float Fp8E4M3ToFloat(uint8_t bits) {
  const float sign = (bits & 0x80) ? -1.0f : 1.0f;
  const int exp = (bits >> 3) & 0xf;
  const int mant = bits & 0x7;
  if (exp == 0xf && mant == 0x7) return std::nanf("");
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -9);  // subnormal: m * 2^-9
  return sign * std::ldexp(static_cast<float>(8 + mant), exp - 10);      // 1.m * 2^(exp - 7)
}

uint8_t FloatToFp8E4M3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (a >= kFp8E4M3Max) return sign | 0x7e;  // saturate (also inf)
  if (a < 0x1p-6f) {
    // Subnormal range (and the rounding up into the smallest normal, code 8): steps of 2^-9,
    // scaled exactly, rounded half to even.
    const float steps = a * 512.0f;
    float r = std::floor(steps);
    const float frac = steps - r;
    if (frac > 0.5f || (frac == 0.5f && std::fmod(r, 2.0f) != 0.0f)) r += 1.0f;
    return sign | static_cast<uint8_t>(r);
  }
  // Normal: keep 3 of the float's 23 mantissa bits, round half to even on the bit pattern (a carry
  // moves into the exponent, which is the next code), rebias the exponent from 127 to 7.
  uint32_t b;
  std::memcpy(&b, &a, 4);
  b += (1u << 19) - 1u + ((b >> 20) & 1u);
  const uint32_t code = (b >> 20) - ((127u - 7u) << 3);
  return sign | static_cast<uint8_t>(std::min<uint32_t>(code, 0x7e));
}

void DequantizeFp8E4M3(const uint8_t* q, int64_t rows, int64_t cols, const float* scales,
                       int64_t block_rows, int64_t block_cols, float* out) {
  float table[256];
  for (int i = 0; i < 256; ++i) table[i] = Fp8E4M3ToFloat(static_cast<uint8_t>(i));
  const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
  for (int64_t r = 0; r < rows; ++r) {
    const float* srow = scales + (r / block_rows) * scale_cols;
    const uint8_t* qrow = q + r * cols;
    float* orow = out + r * cols;
    for (int64_t c = 0; c < cols; ++c) orow[c] = table[qrow[c]] * srow[c / block_cols];
  }
}

void QuantizeFp8E4M3PerRow(const float* w, int64_t rows, int64_t cols, uint8_t* q, float* scales) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* wrow = w + r * cols;
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(wrow[c]));
    const float scale = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
    scales[r] = scale;
    for (int64_t c = 0; c < cols; ++c) q[r * cols + c] = FloatToFp8E4M3(wrow[c] / scale);
  }
}

}  // namespace tandem::cpu
