// LoadModelConfig over config.json variants of each supported architecture.
#include "model/config.h"

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "model_files_util.h"

namespace tandem::testing {
namespace {

using nlohmann::json;

json BaseConfig(const std::string& arch, const std::string& model_type) {
  return {{"architectures", {arch}},
          {"model_type", model_type},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"vocab_size", 100},
          {"max_position_embeddings", 2048},
          {"rms_norm_eps", 1e-5},
          {"hidden_act", "silu"}};
}

Result<ModelConfig> Load(const json& config, const json* generation = nullptr) {
  TempDir dir;
  WriteJson(dir.file("config.json"), config);
  if (generation) WriteJson(dir.file("generation_config.json"), *generation);
  return LoadModelConfig(dir.path());
}

TEST(ConfigTest, RealTinyQwen3) {
  auto c = LoadModelConfig(DefaultModelDir());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c->model_type, "qwen3");
  EXPECT_EQ(c->hidden_size, 256);
  EXPECT_EQ(c->num_hidden_layers, 6);
  EXPECT_EQ(c->num_attention_heads, 4);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->intermediate_size, 768);
  EXPECT_EQ(c->vocab_size, 151936);
  EXPECT_EQ(c->max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);  // from rope_parameters
  EXPECT_EQ(c->rope_scaling.type, "default");
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->torch_dtype, "bfloat16");
  EXPECT_EQ(c->bos_token_id, 151643);
  EXPECT_EQ(c->eos_token_ids, std::vector<int>({151645}));
}

TEST(ConfigTest, Llama2DefaultsHeadDimAndUntied) {
  json j = BaseConfig("LlamaForCausalLM", "llama");
  j["rope_theta"] = 10000.0;
  j["rope_scaling"] = nullptr;
  j["torch_dtype"] = "float16";
  j["eos_token_id"] = 2;
  auto c = Load(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->head_dim, 16);  // 64 / 4
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->rope_scaling.type, "default");
  EXPECT_EQ(c->torch_dtype, "float16");
  EXPECT_EQ(c->eos_token_ids, std::vector<int>({2}));
}

TEST(ConfigTest, Llama31ScalingOldSpellingAndEosLists) {
  json j = BaseConfig("LlamaForCausalLM", "llama");
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  j["eos_token_id"] = {128001, 128008, 128009};
  json gen = {{"eos_token_id", {128001, 128009, 7}}};
  auto c = Load(j, &gen);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c->eos_token_ids, std::vector<int>({128001, 128008, 128009, 7}));
}

TEST(ConfigTest, Llama3ScalingNewSpelling) {
  json j = BaseConfig("LlamaForCausalLM", "llama");
  j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "llama3"}, {"factor", 32.0},
                          {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}};
  j["tie_word_embeddings"] = true;
  auto c = Load(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_TRUE(c->tie_word_embeddings);
}

TEST(ConfigTest, LinearScalingWithTypeKey) {
  json j = BaseConfig("LlamaForCausalLM", "llama");
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  auto c = Load(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 2.0);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);  // the default
}

TEST(ConfigTest, RefusedRopeTypesAreNamed) {
  for (const char* type : {"yarn", "dynamic", "longrope"}) {
    for (const char* key : {"rope_scaling", "rope_parameters"}) {
      json j = BaseConfig("Qwen2ForCausalLM", "qwen2");
      j[key] = {{"rope_type", type}, {"factor", 4.0}, {"rope_theta", 1e6}};
      auto c = Load(j);
      ASSERT_FALSE(c.ok()) << type;
      EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented);
      EXPECT_NE(c.status().message().find(type), std::string::npos) << c.status().ToString();
    }
  }
  json j = BaseConfig("LlamaForCausalLM", "llama");
  j["rope_scaling"] = {{"type", "linear"}};  // no factor
  EXPECT_EQ(Load(j).status().code(), StatusCode::kInvalidArgument);
}

TEST(ConfigTest, Qwen2HasBiasEvenWithoutTheField) {
  json j = BaseConfig("Qwen2ForCausalLM", "qwen2");
  j["rope_theta"] = 1000000.0;
  j["tie_word_embeddings"] = true;
  j["use_sliding_window"] = false;
  j["sliding_window"] = 131072;  // ignored when use_sliding_window is false
  j["max_position_embeddings"] = 32768;
  j["head_dim"] = nullptr;
  auto c = Load(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  j["use_sliding_window"] = true;
  j["sliding_window"] = 4096;
  EXPECT_EQ(Load(j).status().code(), StatusCode::kUnimplemented);
}

TEST(ConfigTest, MistralSlidingWindow) {
  json j = BaseConfig("MistralForCausalLM", "mistral");
  j["max_position_embeddings"] = 32768;
  j["sliding_window"] = nullptr;
  j["head_dim"] = 32;  // explicit head_dim wins over hidden / heads
  auto c = Load(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_FALSE(c->tie_word_embeddings);
  j["sliding_window"] = 32768;
  EXPECT_TRUE(Load(j).ok());
  j["sliding_window"] = 4096;
  auto refused = Load(j);
  EXPECT_EQ(refused.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(refused.status().message().find("sliding_window"), std::string::npos);
}

TEST(ConfigTest, UnknownArchitectureIsNamed) {
  auto c = Load(BaseConfig("GPT2LMHeadModel", "gpt2"));
  EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(c.status().message().find("GPT2LMHeadModel"), std::string::npos);
}

TEST(ConfigTest, ArchitectureFromModelType) {
  json j = BaseConfig("x", "qwen3");
  j.erase("architectures");
  auto c = Load(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "Qwen3ForCausalLM");
}

TEST(ConfigTest, MissingFileAndBadFields) {
  TempDir empty;
  EXPECT_EQ(LoadModelConfig(empty.path()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(LoadModelConfig(empty.path() + "/nope").status().code(), StatusCode::kNotFound);

  json j = BaseConfig("LlamaForCausalLM", "llama");
  j.erase("hidden_size");
  auto c = Load(j);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("hidden_size"), std::string::npos);

  j = BaseConfig("LlamaForCausalLM", "llama");
  j["num_key_value_heads"] = 3;  // 4 % 3 != 0
  EXPECT_EQ(Load(j).status().code(), StatusCode::kInvalidArgument);
  j = BaseConfig("LlamaForCausalLM", "llama");
  j["vocab_size"] = "many";
  EXPECT_EQ(Load(j).status().code(), StatusCode::kInvalidArgument);
  j = BaseConfig("LlamaForCausalLM", "llama");
  j["hidden_act"] = "gelu";
  EXPECT_EQ(Load(j).status().code(), StatusCode::kUnimplemented);

  TempDir bad;
  WriteText(bad.file("config.json"), "{not json");
  EXPECT_EQ(LoadModelConfig(bad.path()).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::testing
