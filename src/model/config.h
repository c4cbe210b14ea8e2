// ModelConfig: the parts of a Hugging Face config.json that the engine needs.
//
// Source of the format: transformers' configuration_qwen3.py / configuration_llama.py /
// configuration_qwen2.py / configuration_mistral.py. Supported architectures:
//   Qwen3ForCausalLM   (per-head q/k RMSNorm, no qkv bias)
//   LlamaForCausalLM   (Llama 2/3/3.x; optional `llama3` rope scaling)
//   Qwen2ForCausalLM   (Qwen2 / Qwen2.5: q/k/v bias)
//   MistralForCausalLM (Llama block; sliding_window must be null or >= the context)
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "model/quantization.h"

namespace tandem {

// RoPE frequency scaling. `default` = none. Implemented: default, linear, llama3.
// Any other type (yarn, dynamic, longrope, ...) is refused by name at load.
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;                 // llama3
  double high_freq_factor = 4.0;                // llama3
  int original_max_position_embeddings = 8192;  // llama3
};

struct ModelConfig {
  std::string architecture;  // e.g. "Qwen3ForCausalLM"
  std::string model_type;    // e.g. "qwen3"
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;  // hidden_size / num_attention_heads when config.json has none
  int vocab_size = 0;
  int max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;  // from `rope_theta` or `rope_parameters.rope_theta`
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections have a bias (Qwen2)
  bool qk_norm = false;         // per-head RMSNorm on q and k before RoPE (Qwen3)
  std::string torch_dtype;      // "bfloat16", "float16", "float32" as written
  int bos_token_id = -1;
  // End-of-sequence ids: config.json's eos_token_id (int or list) joined with
  // generation_config.json's, when present.
  std::vector<int> eos_token_ids;
  // config.json's quantization_config (model/quantization.h); kNone when absent.
  QuantizationConfig quantization;
};

// Reads <model_dir>/config.json (and generation_config.json when present).
// Errors: NotFound (no config.json), InvalidArgument (a field missing or of the wrong type,
// inconsistent head counts), Unimplemented (an unknown architecture, rope scaling type or
// quantization method, named).
Result<ModelConfig> LoadModelConfig(const std::string& model_dir);

}  // namespace tandem
