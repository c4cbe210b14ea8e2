#include "model/weights.h"

#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "kernels/cpu/fp8.h"

namespace tandem {

Result<const TensorView*> FindWeight(const SafetensorsModel& st, const std::string& name,
                                     const std::vector<int64_t>& expected) {
  auto found = st.Find(name);
  if (!found.ok()) {
    return Err(StatusCode::kInvalidArgument, "checkpoint has no tensor {} (expected shape {})",
               name, ShapeString(expected));
  }
  const TensorView& t = **found;
  if (t.shape != expected) {
    return Err(StatusCode::kInvalidArgument,
               "tensor {} has shape {}, but config.json implies {} (in {})", name,
               ShapeString(t.shape), ShapeString(expected), t.file);
  }
  return &t;
}

namespace {

Status Bind(const SafetensorsModel& st, const std::string& name, std::vector<int64_t> expected,
            std::vector<float>* out) {
  TANDEM_ASSIGN_OR_RETURN(const TensorView* t, FindWeight(st, name, expected));
  if (t->dtype == DType::kF8E4M3) {
    return Err(StatusCode::kInvalidArgument, "tensor {} in {} is F8_E4M3; only the linear projections "
               "of an FP8 checkpoint may be", name, t->file);
  }
  return TensorToFloat(*t, out);
}

// t in place as a kernel matrix [rows, cols]: BF16/F16/F32 whose data is aligned to its element.
bool InPlace(const TensorView& t, int64_t rows, int64_t cols, cpu::WeightMatrix* m) {
  cpu::WeightType type;
  switch (t.dtype) {
    case DType::kBF16: type = cpu::WeightType::kBF16; break;
    case DType::kF16: type = cpu::WeightType::kF16; break;
    case DType::kF32: type = cpu::WeightType::kF32; break;
    default: return false;
  }
  if (reinterpret_cast<uintptr_t>(t.data) % cpu::WeightTypeBytes(type) != 0) return false;
  *m = cpu::WeightMatrix{type, t.data, rows, cols};
  return true;
}

// t (not F8_E4M3) as a MatrixWeight: in place when it can be, else fp32 (TensorToFloat's errors).
Status MatrixOf(const TensorView& t, int64_t rows, int64_t cols, MatrixWeight* out) {
  out->owned.clear();
  out->mapped = cpu::WeightMatrix{cpu::WeightType::kF32, nullptr, rows, cols};
  if (InPlace(t, rows, cols, &out->mapped)) return Status::Ok();
  out->mapped.data = nullptr;
  return TensorToFloat(t, &out->owned);
}

// A matrix that is not a linear projection (the embedding): in place; F8_E4M3 is refused.
Status BindMatrix(const SafetensorsModel& st, const std::string& name, std::vector<int64_t> expected,
                  MatrixWeight* out) {
  TANDEM_ASSIGN_OR_RETURN(const TensorView* t, FindWeight(st, name, expected));
  if (t->dtype == DType::kF8E4M3) {
    return Err(StatusCode::kInvalidArgument, "tensor {} in {} is F8_E4M3; only the linear projections "
               "of an FP8 checkpoint may be", name, t->file);
  }
  return MatrixOf(*t, expected[0], expected[1], out);
}

// The shape of a scale tensor, as [rows, cols] of scale blocks: [] and [n] are [1, 1] and [n, 1].
std::vector<int64_t> ScaleGrid(const std::vector<int64_t>& shape) {
  if (shape.empty()) return {1, 1};
  if (shape.size() == 1) return {shape[0], 1};
  return shape;
}

}  // namespace

Result<Fp8WeightView> FindFp8Scales(const SafetensorsModel& st, const std::string& name, const TensorView* t,
                                    int64_t rows, int64_t cols, const QuantizationConfig& q) {
  if (!q.enabled()) {
    return Err(StatusCode::kInvalidArgument, "tensor {} in {} is F8_E4M3, but config.json has no "
               "quantization_config saying how it is scaled", name, t->file);
  }
  Fp8WeightView v;
  v.codes = t;
  v.block_rows = q.block_rows > 0 ? q.block_rows : rows;
  v.block_cols = q.block_cols > 0 ? q.block_cols : cols;
  const std::vector<int64_t> grid = {(rows + v.block_rows - 1) / v.block_rows,
                                     (cols + v.block_cols - 1) / v.block_cols};
  const std::string scale_name = name.substr(0, name.size() - std::string("weight").size()) + q.scale_suffix;
  auto found = st.Find(scale_name);
  if (!found.ok()) {
    return Err(StatusCode::kInvalidArgument, "FP8 tensor {} in {} has no scale tensor {} ({} scales: "
               "shape {})", name, t->file, scale_name, q.Describe(), ShapeString(grid));
  }
  const TensorView& s = **found;
  if (ScaleGrid(s.shape) != grid) {
    return Err(StatusCode::kInvalidArgument, "scale tensor {} has shape {}, but {} [{}, {}] with {} "
               "needs {}", scale_name, ShapeString(s.shape), name, rows, cols, q.Describe(), ShapeString(grid));
  }
  TANDEM_RETURN_IF_ERROR(TensorToFloat(s, &v.scales));
  for (float x : v.scales) {
    if (!std::isfinite(x)) {
      return Err(StatusCode::kInvalidArgument, "scale tensor {} in {} holds {}", scale_name, s.file, x);
    }
  }
  return v;
}

Status BindLinear(const SafetensorsModel& st, const std::string& name, std::vector<int64_t> expected,
                  const QuantizationConfig& q, MatrixWeight* out) {
  TANDEM_ASSIGN_OR_RETURN(const TensorView* t, FindWeight(st, name, expected));
  const int64_t rows = expected[0], cols = expected[1];
  if (q.source == "online") {
    out->mapped = cpu::WeightMatrix{cpu::WeightType::kF32, nullptr, rows, cols};
    TANDEM_RETURN_IF_ERROR(TensorToFloat(*t, &out->owned));
    std::vector<uint8_t> codes(out->owned.size());
    std::vector<float> scales(rows);
    cpu::QuantizeFp8E4M3PerRow(out->owned.data(), rows, cols, codes.data(), scales.data());
    cpu::DequantizeFp8E4M3(codes.data(), rows, cols, scales.data(), 1, cols, out->owned.data());
    return Status::Ok();
  }
  if (t->dtype != DType::kF8E4M3) return MatrixOf(*t, rows, cols, out);
  TANDEM_ASSIGN_OR_RETURN(const Fp8WeightView v, FindFp8Scales(st, name, t, rows, cols, q));
  out->mapped = cpu::WeightMatrix{cpu::WeightType::kF32, nullptr, rows, cols};
  out->owned.resize(static_cast<size_t>(rows * cols));
  cpu::DequantizeFp8E4M3(t->data, rows, cols, v.scales.data(), v.block_rows, v.block_cols, out->owned.data());
  return Status::Ok();
}

std::vector<float> MatrixWeight::ToFloat() const {
  if (!owned.empty()) return owned;
  std::vector<float> out(static_cast<size_t>(mapped.rows * mapped.cols));
  if (mapped.data != nullptr) cpu::WeightRowsToFloat(mapped, 0, mapped.rows, out.data());
  return out;
}

size_t MatrixWeight::bytes() const {
  if (!owned.empty()) return owned.size() * sizeof(float);
  if (mapped.data == nullptr) return 0;
  return static_cast<size_t>(mapped.rows * mapped.cols) * cpu::WeightTypeBytes(mapped.type);
}

size_t ModelWeights::bytes() const {
  auto vec = [](const std::vector<float>& v) { return v.size() * sizeof(float); };
  size_t total = embed.bytes() + lm_head.bytes() + vec(final_norm);
  for (const LayerWeights& l : layers) {
    total += l.q_proj.bytes() + l.k_proj.bytes() + l.v_proj.bytes() + l.o_proj.bytes() +
             l.gate_proj.bytes() + l.up_proj.bytes() + l.down_proj.bytes();
    total += vec(l.input_norm) + vec(l.q_bias) + vec(l.k_bias) + vec(l.v_bias) + vec(l.o_bias) +
             vec(l.q_norm) + vec(l.k_norm) + vec(l.post_norm);
  }
  return total;
}

Result<ModelWeights> LoadModelWeights(std::shared_ptr<const SafetensorsModel> source, const ModelConfig& c) {
  const SafetensorsModel& st = *source;
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = static_cast<int64_t>(c.num_attention_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;
  const int64_t inter = c.intermediate_size;
  const bool o_bias = c.attention_bias && c.architecture != "Qwen2ForCausalLM";

  ModelWeights w;
  TANDEM_RETURN_IF_ERROR(BindMatrix(st, "model.embed_tokens.weight", {c.vocab_size, hidden}, &w.embed));
  w.layers.resize(c.num_hidden_layers);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& l = w.layers[i];
    const std::string p = fmt::format("model.layers.{}.", i);
    TANDEM_RETURN_IF_ERROR(Bind(st, p + "input_layernorm.weight", {hidden}, &l.input_norm));
    TANDEM_RETURN_IF_ERROR(BindLinear(st, p + "self_attn.q_proj.weight", {q_dim, hidden}, c.quantization, &l.q_proj));
    TANDEM_RETURN_IF_ERROR(BindLinear(st, p + "self_attn.k_proj.weight", {kv_dim, hidden}, c.quantization, &l.k_proj));
    TANDEM_RETURN_IF_ERROR(BindLinear(st, p + "self_attn.v_proj.weight", {kv_dim, hidden}, c.quantization, &l.v_proj));
    TANDEM_RETURN_IF_ERROR(BindLinear(st, p + "self_attn.o_proj.weight", {hidden, q_dim}, c.quantization, &l.o_proj));
    if (c.attention_bias) {
      TANDEM_RETURN_IF_ERROR(Bind(st, p + "self_attn.q_proj.bias", {q_dim}, &l.q_bias));
      TANDEM_RETURN_IF_ERROR(Bind(st, p + "self_attn.k_proj.bias", {kv_dim}, &l.k_bias));
      TANDEM_RETURN_IF_ERROR(Bind(st, p + "self_attn.v_proj.bias", {kv_dim}, &l.v_bias));
    }
    if (o_bias) TANDEM_RETURN_IF_ERROR(Bind(st, p + "self_attn.o_proj.bias", {hidden}, &l.o_bias));
    if (c.qk_norm) {
      TANDEM_RETURN_IF_ERROR(Bind(st, p + "self_attn.q_norm.weight", {c.head_dim}, &l.q_norm));
      TANDEM_RETURN_IF_ERROR(Bind(st, p + "self_attn.k_norm.weight", {c.head_dim}, &l.k_norm));
    }
    TANDEM_RETURN_IF_ERROR(
        Bind(st, p + "post_attention_layernorm.weight", {hidden}, &l.post_norm));
    TANDEM_RETURN_IF_ERROR(BindLinear(st, p + "mlp.gate_proj.weight", {inter, hidden}, c.quantization, &l.gate_proj));
    TANDEM_RETURN_IF_ERROR(BindLinear(st, p + "mlp.up_proj.weight", {inter, hidden}, c.quantization, &l.up_proj));
    TANDEM_RETURN_IF_ERROR(BindLinear(st, p + "mlp.down_proj.weight", {hidden, inter}, c.quantization, &l.down_proj));
  }
  TANDEM_RETURN_IF_ERROR(Bind(st, "model.norm.weight", {hidden}, &w.final_norm));
  if (!c.tie_word_embeddings) {
    // An FP8 checkpoint may store lm_head in FP8; --quantization fp8 leaves it as stored.
    const QuantizationConfig lm_head_q = c.quantization.source == "online" ? QuantizationConfig() : c.quantization;
    TANDEM_RETURN_IF_ERROR(BindLinear(st, "lm_head.weight", {c.vocab_size, hidden}, lm_head_q, &w.lm_head));
  }
  w.source = std::move(source);
  return w;
}

}  // namespace tandem
