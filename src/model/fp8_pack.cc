#include "model/fp8_pack.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "kernels/cpu/fp8.h"
#include "model/weights.h"

namespace tandem {
namespace {

// fn(begin, end) over [0, n) in `threads` contiguous ranges.
template <typename Fn>
void ParallelRows(int64_t n, int threads, Fn fn) {
  threads = static_cast<int>(std::clamp<int64_t>(threads, 1, std::max<int64_t>(n / 64, 1)));
  if (threads == 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] { fn(n * t / threads, n * (t + 1) / threads); });
  }
  for (std::thread& th : pool) th.join();
}

// Quantizes float rows [rows, cols] per row into codes/scales (cpu::QuantizeFp8E4M3PerRow by rows).
void QuantizeRows(const float* w, int64_t rows, int64_t cols, uint8_t* codes, float* scales, int threads) {
  ParallelRows(rows, threads, [&](int64_t b, int64_t e) {
    cpu::QuantizeFp8E4M3PerRow(w + b * cols, e - b, cols, codes + b * cols, scales + b);
  });
}

}  // namespace

std::vector<FusedLinear> LayerLinears(const ModelConfig& c, int layer) {
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = static_cast<int64_t>(c.num_attention_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;
  const int64_t inter = c.intermediate_size;
  const std::string p = fmt::format("model.layers.{}.", layer);
  return {
      {"qkv", {{p + "self_attn.q_proj.weight", q_dim}, {p + "self_attn.k_proj.weight", kv_dim},
               {p + "self_attn.v_proj.weight", kv_dim}}, hidden},
      {"o", {{p + "self_attn.o_proj.weight", hidden}}, q_dim},
      {"gate_up", {{p + "mlp.gate_proj.weight", inter}, {p + "mlp.up_proj.weight", inter}}, hidden},
      {"down", {{p + "mlp.down_proj.weight", hidden}}, inter},
  };
}

Result<Fp8PackedLinear> PackFp8Linear(const SafetensorsModel& st, const std::vector<LinearPart>& parts,
                                      int64_t cols, const QuantizationConfig& q, int threads) {
  std::vector<const TensorView*> tensors;
  bool block128 = q.source != "online" && q.block_rows == 128 && q.block_cols == 128;
  Fp8PackedLinear out;
  out.cols = cols;
  for (const LinearPart& part : parts) {
    TANDEM_ASSIGN_OR_RETURN(const TensorView* t, FindWeight(st, part.name, {part.rows, cols}));
    tensors.push_back(t);
    block128 = block128 && t->dtype == DType::kF8E4M3 && part.rows % 128 == 0;
    out.rows += part.rows;
  }
  out.block128 = block128;
  out.codes.resize(static_cast<size_t>(out.rows * cols));
  const int64_t kb = (cols + 127) / 128;
  out.scale_cols = block128 ? (kb + 3) / 4 * 4 : 1;
  out.scales.assign(block128 ? static_cast<size_t>(out.rows / 128 * out.scale_cols) : static_cast<size_t>(out.rows),
                    1.0f);
  int64_t row0 = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const TensorView* t = tensors[i];
    const int64_t rows = parts[i].rows;
    uint8_t* codes = out.codes.data() + row0 * cols;
    if (t->dtype == DType::kF8E4M3 && q.source != "online") {
      TANDEM_ASSIGN_OR_RETURN(const Fp8WeightView v, FindFp8Scales(st, parts[i].name, t, rows, cols, q));
      if (block128) {
        std::memcpy(codes, t->data, static_cast<size_t>(rows * cols));
        for (int64_t b = 0; b < rows / 128; ++b) {
          std::copy_n(v.scales.begin() + b * kb, kb, out.scales.begin() + (row0 / 128 + b) * out.scale_cols);
        }
      } else if (v.block_cols >= cols) {  // per tensor or per (group of) rows: the codes stand
        std::memcpy(codes, t->data, static_cast<size_t>(rows * cols));
        for (int64_t r = 0; r < rows; ++r) out.scales[row0 + r] = v.scales[r / v.block_rows];
      } else {  // other blocks: dequantize, quantize again per row
        std::vector<float> w(static_cast<size_t>(rows * cols));
        cpu::DequantizeFp8E4M3(t->data, rows, cols, v.scales.data(), v.block_rows, v.block_cols, w.data());
        QuantizeRows(w.data(), rows, cols, codes, out.scales.data() + row0, threads);
        out.requantized = true;
      }
    } else {
      // BF16 / F16 / F32 (an unquantized part, or --quantization fp8): per row.
      out.from_unquantized = true;
      std::vector<float> w;
      TANDEM_RETURN_IF_ERROR(TensorToFloat(*t, &w));
      QuantizeRows(w.data(), rows, cols, codes, out.scales.data() + row0, threads);
    }
    row0 += rows;
  }
  return out;
}

}  // namespace tandem
