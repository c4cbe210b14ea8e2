// FP8 E4M3 ("e4m3fn"): the OCP 8-bit floating point format (OCP OFP8 specification rev. 1.0,
// 2023, section 5.1), as safetensors' F8_E4M3, torch.float8_e4m3fn and CUDA's __NV_E4M3 store it:
// 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN; the largest
// finite magnitude is 448 (S.1111.110), the smallest subnormal 2^-9.
//
// Block-scaled weights (the scheme of Hugging Face's FineGrainedFP8 / DeepSeek-V3 checkpoints,
// `weight_scale_inv`, and of compressed-tensors' float-quantized `weight_scale`): a weight
// [rows, cols] is stored as e4m3 q and a float scale per block of block_rows x block_cols, and
// means w[r][c] = e4m3(q[r][c]) * scale[r / block_rows][c / block_cols]. Per-tensor scaling is the
// one block [rows, cols]; per-channel (per output row) is blocks of [1, cols].
#pragma once

#include <cstdint>

namespace tandem::cpu {

inline constexpr float kFp8E4M3Max = 448.0f;

// Exact: every e4m3 value is a float. 0x7f and 0xff give NaN.
float Fp8E4M3ToFloat(uint8_t bits);

// Round to nearest, ties to even, saturating to +-448 (CUDA's __NV_SATFINITE; torch clamps to
// the same range before converting); NaN gives 0x7f; -0 keeps its sign.
uint8_t FloatToFp8E4M3(float f);

// w[r][c] = Fp8E4M3ToFloat(q[r * cols + c]) * scales[(r / block_rows) * scale_cols + c / block_cols]
// with scale_cols = ceil(cols / block_cols). q: [rows, cols]; scales:
// [ceil(rows / block_rows), scale_cols]; out: [rows, cols] (may not alias q).
void DequantizeFp8E4M3(const uint8_t* q, int64_t rows, int64_t cols, const float* scales,
                       int64_t block_rows, int64_t block_cols, float* out);

// Per-channel quantization of w [rows, cols] (vLLM's and TensorRT-LLM's FP8 weight scheme):
// scales[r] = max_c |w[r][c]| / 448 (1 for an all-zero row), q[r][c] = e4m3(w[r][c] / scales[r]).
void QuantizeFp8E4M3PerRow(const float* w, int64_t rows, int64_t cols, uint8_t* q, float* scales);

}  // namespace tandem::cpu
