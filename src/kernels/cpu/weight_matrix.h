// A weight matrix as the CPU kernels take it: [rows, cols] row-major in the checkpoint's dtype (bf16 or
// f16 read in place, e.g. from the mapped safetensors file) or fp32, and the exact conversions of one
// element to fp32 (issue 29).
#pragma once

#include <cstdint>
#include <cstring>

namespace tandem::cpu {

enum class WeightType : uint8_t { kF32, kBF16, kF16 };

// Bytes per element: 4 or 2.
inline int WeightTypeBytes(WeightType t) { return t == WeightType::kF32 ? 4 : 2; }
const char* WeightTypeName(WeightType t);  // "f32", "bf16", "f16"

struct WeightMatrix {
  WeightType type = WeightType::kF32;
  const void* data = nullptr;  // rows * cols elements; any alignment of the element size
  int64_t rows = 0;            // n: output features (Hugging Face's [out, in])
  int64_t cols = 0;            // k: input features

  // Element (r, c)'s address.
  const uint8_t* At(int64_t r, int64_t c) const {
    return static_cast<const uint8_t*>(data) + (r * cols + c) * WeightTypeBytes(type);
  }
};

// bf16 -> fp32: exact (the bits shifted up by 16).
inline float Bf16BitsToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// IEEE half -> fp32: exact (subnormals normalized, inf and NaN kept).
float HalfBitsToFloat(uint16_t h);

// rows [row_begin, row_begin + num_rows) of w in fp32 into out [num_rows, w.cols]; exact.
void WeightRowsToFloat(const WeightMatrix& w, int64_t row_begin, int64_t num_rows, float* out);

}  // namespace tandem::cpu
