// LoadModelConfig: config.json (+ generation_config.json) -> ModelConfig.
// Field names and defaults follow transformers' configuration_{qwen3,llama,qwen2,mistral}.py.
#include "model/config.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/file_util.h"

namespace tandem {
namespace {

using nlohmann::json;

struct ArchInfo {
  const char* architecture;
  const char* model_type;
  int default_max_position_embeddings;
};

constexpr ArchInfo kArchs[] = {
    {"Qwen3ForCausalLM", "qwen3", 32768},
    {"LlamaForCausalLM", "llama", 2048},
    {"Qwen2ForCausalLM", "qwen2", 32768},
    {"MistralForCausalLM", "mistral", 4096 * 32},
};

const ArchInfo* FindArch(const std::string& architecture) {
  for (const ArchInfo& a : kArchs) {
    if (architecture == a.architecture) return &a;
  }
  return nullptr;
}

// Reads an integer field. Absent or null -> `fallback` (nullopt means required).
Status GetInt(const json& j, const char* key, std::optional<int> fallback, int* out,
              const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (!fallback) return Err(StatusCode::kInvalidArgument, "{}: missing field '{}'", file, key);
    *out = *fallback;
    return Status::Ok();
  }
  if (!it->is_number_integer()) {
    return Err(StatusCode::kInvalidArgument, "{}: field '{}' must be an integer, got {}", file,
               key, it->dump());
  }
  *out = it->get<int>();
  return Status::Ok();
}

Status GetDouble(const json& j, const char* key, double fallback, double* out,
                 const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    *out = fallback;
    return Status::Ok();
  }
  if (!it->is_number()) {
    return Err(StatusCode::kInvalidArgument, "{}: field '{}' must be a number, got {}", file, key,
               it->dump());
  }
  *out = it->get<double>();
  return Status::Ok();
}

Status GetBool(const json& j, const char* key, bool fallback, bool* out, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    *out = fallback;
    return Status::Ok();
  }
  if (!it->is_boolean()) {
    return Err(StatusCode::kInvalidArgument, "{}: field '{}' must be a boolean, got {}", file, key,
               it->dump());
  }
  *out = it->get<bool>();
  return Status::Ok();
}

// eos_token_id: int, list of ints, or null. Appends ids not yet present.
Status AppendEosIds(const json& j, const std::string& file, std::vector<int>* ids) {
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return Status::Ok();
  auto add = [&](const json& v) -> Status {
    if (!v.is_number_integer()) {
      return Err(StatusCode::kInvalidArgument, "{}: eos_token_id must be an int or a list of "
                 "ints, got {}", file, it->dump());
    }
    int id = v.get<int>();
    if (std::find(ids->begin(), ids->end(), id) == ids->end()) ids->push_back(id);
    return Status::Ok();
  };
  if (it->is_array()) {
    for (const json& v : *it) TANDEM_RETURN_IF_ERROR(add(v));
    return Status::Ok();
  }
  return add(*it);
}

// Rope: `rope_parameters` (transformers >= 5: theta, type and scaling fields together),
// `rope_scaling` (older: "type" or "rope_type" plus scaling fields; theta top-level).
Status ParseRope(const json& j, const std::string& file, ModelConfig* c) {
  TANDEM_RETURN_IF_ERROR(GetDouble(j, "rope_theta", 10000.0, &c->rope_theta, file));
  const json* scaling = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_object()) {
      return Err(StatusCode::kInvalidArgument, "{}: '{}' must be an object, got {}", file, key,
                 it->dump());
    }
    if (scaling == nullptr) scaling = &*it;  // rope_parameters wins when both exist
    if (it->contains("rope_theta")) {
      TANDEM_RETURN_IF_ERROR(GetDouble(*it, "rope_theta", 10000.0, &c->rope_theta, file));
    }
  }
  if (c->rope_theta <= 0) {
    return Err(StatusCode::kInvalidArgument, "{}: rope_theta must be positive", file);
  }
  RopeScaling& rs = c->rope_scaling;
  if (scaling == nullptr) return Status::Ok();
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    auto it = scaling->find(key);
    if (it != scaling->end() && !it->is_null()) {
      if (!it->is_string()) {
        return Err(StatusCode::kInvalidArgument, "{}: rope '{}' must be a string", file, key);
      }
      type = it->get<std::string>();
      break;
    }
  }
  rs.type = type;
  if (type == "default") return Status::Ok();
  if (type != "linear" && type != "llama3") {
    return Err(StatusCode::kUnimplemented,
               "{}: rope scaling type '{}' is not implemented (implemented: default, linear, "
               "llama3)", file, type);
  }
  if (!scaling->contains("factor")) {
    return Err(StatusCode::kInvalidArgument, "{}: rope scaling '{}' needs 'factor'", file, type);
  }
  TANDEM_RETURN_IF_ERROR(GetDouble(*scaling, "factor", 1.0, &rs.factor, file));
  if (rs.factor <= 0) {
    return Err(StatusCode::kInvalidArgument, "{}: rope scaling factor must be positive", file);
  }
  if (type == "llama3") {
    TANDEM_RETURN_IF_ERROR(
        GetDouble(*scaling, "low_freq_factor", 1.0, &rs.low_freq_factor, file));
    TANDEM_RETURN_IF_ERROR(
        GetDouble(*scaling, "high_freq_factor", 4.0, &rs.high_freq_factor, file));
    TANDEM_RETURN_IF_ERROR(GetInt(*scaling, "original_max_position_embeddings", 8192,
                                  &rs.original_max_position_embeddings, file));
    if (rs.high_freq_factor <= rs.low_freq_factor || rs.low_freq_factor <= 0 ||
        rs.original_max_position_embeddings <= 0) {
      return Err(StatusCode::kInvalidArgument,
                 "{}: llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor and a "
                 "positive original_max_position_embeddings", file);
    }
  }
  return Status::Ok();
}

}  // namespace

Result<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string file = (std::filesystem::path(model_dir) / "config.json").string();
  TANDEM_ASSIGN_OR_RETURN(json j, ReadJsonFile(file));
  if (!j.is_object()) return Err(StatusCode::kInvalidArgument, "{}: not a JSON object", file);

  ModelConfig c;
  if (auto it = j.find("model_type"); it != j.end() && it->is_string()) {
    c.model_type = it->get<std::string>();
  }
  if (auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty()) {
    if (!(*it)[0].is_string()) {
      return Err(StatusCode::kInvalidArgument, "{}: architectures[0] is not a string", file);
    }
    c.architecture = (*it)[0].get<std::string>();
  } else {
    for (const ArchInfo& a : kArchs) {  // no architectures: infer from model_type
      if (c.model_type == a.model_type) c.architecture = a.architecture;
    }
    if (c.architecture.empty()) {
      return Err(StatusCode::kUnimplemented,
                 "{}: no 'architectures' and model_type '{}' is not supported", file,
                 c.model_type);
    }
  }
  const ArchInfo* arch = FindArch(c.architecture);
  if (arch == nullptr) {
    return Err(StatusCode::kUnimplemented,
               "{}: architecture '{}' is not supported (supported: Qwen3ForCausalLM, "
               "LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM)", file, c.architecture);
  }
  if (c.model_type.empty()) c.model_type = arch->model_type;
  const bool is_qwen2 = c.architecture == "Qwen2ForCausalLM";
  const bool is_qwen3 = c.architecture == "Qwen3ForCausalLM";

  TANDEM_RETURN_IF_ERROR(GetInt(j, "hidden_size", std::nullopt, &c.hidden_size, file));
  TANDEM_RETURN_IF_ERROR(GetInt(j, "intermediate_size", std::nullopt, &c.intermediate_size, file));
  TANDEM_RETURN_IF_ERROR(GetInt(j, "num_hidden_layers", std::nullopt, &c.num_hidden_layers, file));
  TANDEM_RETURN_IF_ERROR(
      GetInt(j, "num_attention_heads", std::nullopt, &c.num_attention_heads, file));
  TANDEM_RETURN_IF_ERROR(
      GetInt(j, "num_key_value_heads", c.num_attention_heads, &c.num_key_value_heads, file));
  TANDEM_RETURN_IF_ERROR(GetInt(j, "vocab_size", std::nullopt, &c.vocab_size, file));
  TANDEM_RETURN_IF_ERROR(GetInt(j, "max_position_embeddings", arch->default_max_position_embeddings,
                                &c.max_position_embeddings, file));
  if (c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_hidden_layers <= 0 ||
      c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 || c.vocab_size <= 0 ||
      c.max_position_embeddings <= 0) {
    return Err(StatusCode::kInvalidArgument, "{}: sizes, layer and head counts must be positive",
               file);
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return Err(StatusCode::kInvalidArgument,
               "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", file,
               c.num_attention_heads, c.num_key_value_heads);
  }
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    TANDEM_RETURN_IF_ERROR(GetInt(j, "head_dim", 0, &c.head_dim, file));
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return Err(StatusCode::kInvalidArgument,
                 "{}: no head_dim and hidden_size {} is not a multiple of num_attention_heads {}",
                 file, c.hidden_size, c.num_attention_heads);
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) {
    return Err(StatusCode::kInvalidArgument, "{}: head_dim {} must be positive and even", file,
               c.head_dim);
  }

  TANDEM_RETURN_IF_ERROR(GetDouble(j, "rms_norm_eps", 1e-6, &c.rms_norm_eps, file));
  TANDEM_RETURN_IF_ERROR(ParseRope(j, file, &c));
  TANDEM_RETURN_IF_ERROR(GetBool(j, "tie_word_embeddings", false, &c.tie_word_embeddings, file));
  TANDEM_RETURN_IF_ERROR(GetBool(j, "attention_bias", false, &c.attention_bias, file));
  if (is_qwen2) c.attention_bias = true;  // Qwen2's q/k/v projections always carry a bias
  c.qk_norm = is_qwen3;

  if (auto it = j.find("hidden_act"); it != j.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>() != "silu") {
      return Err(StatusCode::kUnimplemented, "{}: hidden_act {} is not implemented (only silu)",
                 file, it->dump());
    }
  }
  bool mlp_bias = false;
  TANDEM_RETURN_IF_ERROR(GetBool(j, "mlp_bias", false, &mlp_bias, file));
  if (mlp_bias) return Err(StatusCode::kUnimplemented, "{}: mlp_bias is not implemented", file);

  // Sliding-window attention is not implemented: accept it only where it never applies.
  bool use_sliding_window = c.architecture == "MistralForCausalLM";
  if (is_qwen2 || is_qwen3) {
    TANDEM_RETURN_IF_ERROR(GetBool(j, "use_sliding_window", false, &use_sliding_window, file));
  }
  if (use_sliding_window) {
    int window = 0;
    TANDEM_RETURN_IF_ERROR(GetInt(j, "sliding_window", 0, &window, file));
    if (window != 0 && window < c.max_position_embeddings) {
      return Err(StatusCode::kUnimplemented,
                 "{}: sliding_window {} < max_position_embeddings {} is not implemented", file,
                 window, c.max_position_embeddings);
    }
  }

  for (const char* key : {"torch_dtype", "dtype"}) {
    if (auto it = j.find(key); it != j.end() && it->is_string()) {
      c.torch_dtype = it->get<std::string>();
      break;
    }
  }
  if (auto it = j.find("quantization_config"); it != j.end()) {
    TANDEM_ASSIGN_OR_RETURN(c.quantization, ParseQuantizationConfig(*it, file));
  }
  TANDEM_RETURN_IF_ERROR(GetInt(j, "bos_token_id", -1, &c.bos_token_id, file));
  TANDEM_RETURN_IF_ERROR(AppendEosIds(j, file, &c.eos_token_ids));
  const std::string gen_file =
      (std::filesystem::path(model_dir) / "generation_config.json").string();
  std::error_code ec;
  if (std::filesystem::exists(gen_file, ec)) {
    TANDEM_ASSIGN_OR_RETURN(json g, ReadJsonFile(gen_file));
    if (g.is_object()) TANDEM_RETURN_IF_ERROR(AppendEosIds(g, gen_file, &c.eos_token_ids));
  }
  return c;
}

}  // namespace tandem
