// The CUDA engine's FP8 form of a fused projection (qkv = q, k, v rows; gate_up = gate, up rows;
// o; down), made on the host from the checkpoint: e4m3 codes [rows, cols] and fp32 scales in one
// of the two layouts kernels/cuda/fp8_linear.h runs (no CUDA here: unit-tested on the CPU).
//
//   block128     every part F8_E4M3 with 128 x 128 blocks (q.block_rows == q.block_cols == 128)
//                and a multiple of 128 rows: codes copied as stored, the parts' scale grids
//                [rows_i / 128, ceil(cols / 128)] stacked (Qwen3-8B-FP8's qkv, o, gate_up, down);
//   per channel  otherwise, one scale per row: F8_E4M3 parts scaled per tensor or per channel
//                keep their codes (the scale repeated over the rows it covers); parts in BF16 /
//                F16 / F32 (q.source "online": --quantization fp8) are quantized per row as
//                cpu::QuantizeFp8E4M3PerRow does; F8_E4M3 parts in any other block shape are
//                dequantized and quantized again per row (`requantized` says so: one more rounding).
// Errors: those of FindWeight / FindFp8Scales (weights.h), naming the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/quantization.h"
#include "model/safetensors.h"

namespace tandem {

struct Fp8PackedLinear {
  int64_t rows = 0, cols = 0;
  bool block128 = false;
  std::vector<uint8_t> codes;   // [rows, cols]
  // block128: [rows / 128, scale_cols] with scale_cols = ceil(cols / 128) rounded up to 4 (the
  // device layout, kernels/cuda/fp8_linear.h Fp8BlockScaleCols; padding 1.0); else [rows].
  std::vector<float> scales;
  int64_t scale_cols = 1;
  bool requantized = false;     // some part was dequantized and quantized again per row
  bool from_unquantized = false;  // some part was BF16 / F16 / F32 (quantized per row here)
};

// One checkpoint tensor of a fused projection: its name and rows (all parts share `cols`).
struct LinearPart {
  std::string name;
  int64_t rows = 0;
};

Result<Fp8PackedLinear> PackFp8Linear(const SafetensorsModel& st, const std::vector<LinearPart>& parts,
                                      int64_t cols, const QuantizationConfig& q, int threads = 1);

// The four fused projections of layer `layer` (names as the CUDA weights: "qkv", "o", "gate_up",
// "down"), their parts and input width.
struct FusedLinear {
  std::string name;
  std::vector<LinearPart> parts;
  int64_t cols = 0;
};
std::vector<FusedLinear> LayerLinears(const ModelConfig& c, int layer);

}  // namespace tandem
