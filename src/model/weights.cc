#include "model/weights.h"

#include <fmt/format.h>

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
  return TensorToFloat(*t, out);
}

}  // namespace

Result<ModelWeights> LoadModelWeights(const SafetensorsModel& st, const ModelConfig& c) {
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = static_cast<int64_t>(c.num_attention_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;
  const int64_t inter = c.intermediate_size;
  const bool o_bias = c.attention_bias && c.architecture != "Qwen2ForCausalLM";

  ModelWeights w;
  TANDEM_RETURN_IF_ERROR(Bind(st, "model.embed_tokens.weight", {c.vocab_size, hidden}, &w.embed));
  w.layers.resize(c.num_hidden_layers);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& l = w.layers[i];
    const std::string p = fmt::format("model.layers.{}.", i);
    TANDEM_RETURN_IF_ERROR(Bind(st, p + "input_layernorm.weight", {hidden}, &l.input_norm));
    TANDEM_RETURN_IF_ERROR(Bind(st, p + "self_attn.q_proj.weight", {q_dim, hidden}, &l.q_proj));
    TANDEM_RETURN_IF_ERROR(Bind(st, p + "self_attn.k_proj.weight", {kv_dim, hidden}, &l.k_proj));
    TANDEM_RETURN_IF_ERROR(Bind(st, p + "self_attn.v_proj.weight", {kv_dim, hidden}, &l.v_proj));
    TANDEM_RETURN_IF_ERROR(Bind(st, p + "self_attn.o_proj.weight", {hidden, q_dim}, &l.o_proj));
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
    TANDEM_RETURN_IF_ERROR(Bind(st, p + "mlp.gate_proj.weight", {inter, hidden}, &l.gate_proj));
    TANDEM_RETURN_IF_ERROR(Bind(st, p + "mlp.up_proj.weight", {inter, hidden}, &l.up_proj));
    TANDEM_RETURN_IF_ERROR(Bind(st, p + "mlp.down_proj.weight", {hidden, inter}, &l.down_proj));
  }
  TANDEM_RETURN_IF_ERROR(Bind(st, "model.norm.weight", {hidden}, &w.final_norm));
  if (!c.tie_word_embeddings) {
    TANDEM_RETURN_IF_ERROR(Bind(st, "lm_head.weight", {c.vocab_size, hidden}, &w.lm_head));
  }
  return w;
}

}  // namespace tandem
