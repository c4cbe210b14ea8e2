// quantization_config parsing (model/quantization.h) on the configs the publishers write:
// transformers' FineGrainedFP8 (Qwen/Qwen3-8B-FP8's config.json), vLLM's per-tensor fp8, and
// compressed-tensors float-quantized (llm-compressor's FP8 / FP8_DYNAMIC / FP8_BLOCK presets).
#include "model/quantization.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tandem {
namespace {

using nlohmann::json;

QuantizationConfig Parse(const char* text) {
  auto q = ParseQuantizationConfig(json::parse(text), "config.json");
  EXPECT_TRUE(q.ok()) << q.status().ToString();
  return q.ok() ? *q : QuantizationConfig();
}

Status ParseError(const char* text) {
  auto q = ParseQuantizationConfig(json::parse(text), "config.json");
  return q.ok() ? Status() : q.status();
}

TEST(QuantizationConfigTest, FineGrainedFp8AsQwenPublishesIt) {
  QuantizationConfig q = Parse(R"({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                   "weight_block_size": [128, 128]})");
  EXPECT_EQ(q.method, QuantizationConfig::Method::kFp8);
  EXPECT_EQ(q.block_rows, 128);
  EXPECT_EQ(q.block_cols, 128);
  EXPECT_EQ(q.scale_suffix, "weight_scale_inv");
  EXPECT_EQ(q.Describe(), "fp8 e4m3 (fp8; scales per 128x128 block)");
}

TEST(QuantizationConfigTest, Fp8WithoutBlocksIsPerTensor) {
  QuantizationConfig q = Parse(R"({"quant_method": "fp8", "activation_scheme": "static"})");
  EXPECT_EQ(q.block_rows, 0);
  EXPECT_EQ(q.block_cols, 0);
  EXPECT_EQ(q.scale_suffix, "weight_scale");
}

TEST(QuantizationConfigTest, CompressedTensorsStrategies) {
  const char* channel = R"({"quant_method": "compressed-tensors", "format": "float-quantized",
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float",
      "strategy": "channel", "symmetric": true, "dynamic": false}, "input_activations": {"num_bits": 8,
      "type": "float", "strategy": "token", "dynamic": true}}}, "ignore": ["lm_head"]})";
  QuantizationConfig q = Parse(channel);
  EXPECT_EQ(q.source, "compressed-tensors");
  EXPECT_EQ(q.block_rows, 1);
  EXPECT_EQ(q.block_cols, 0);
  EXPECT_EQ(q.scale_suffix, "weight_scale");
  q = Parse(R"({"quant_method": "compressed-tensors", "format": "naive-quantized", "config_groups": {"g":
      {"weights": {"num_bits": 8, "type": "float", "strategy": "tensor"}}}})");
  EXPECT_EQ(q.block_rows, 0);
  q = Parse(R"({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g":
      {"weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 64]}}}})");
  EXPECT_EQ(q.block_rows, 128);
  EXPECT_EQ(q.block_cols, 64);
}

TEST(QuantizationConfigTest, AbsentOrNullIsNone) {
  auto q = ParseQuantizationConfig(json(), "config.json");
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(q->enabled());
  EXPECT_EQ(q->Describe(), "none");
}

TEST(QuantizationConfigTest, OtherSchemesAreNamed) {
  struct Case { const char* text; StatusCode code; const char* names; };
  const Case cases[] = {
      {R"({"quant_method": "awq", "bits": 4})", StatusCode::kUnimplemented, "'awq'"},
      {R"({"quant_method": "gptq", "bits": 4})", StatusCode::kUnimplemented, "'gptq'"},
      {R"({"load_in_4bit": true})", StatusCode::kUnimplemented, "''"},
      {R"({"quant_method": "fp8", "fmt": "e5m2"})", StatusCode::kUnimplemented, "e5m2"},
      {R"({"quant_method": "fp8", "weight_block_size": [128]})", StatusCode::kInvalidArgument, "weight_block_size"},
      {R"({"quant_method": "fp8", "weight_block_size": [0, 128]})", StatusCode::kInvalidArgument, "weight_block_size"},
      {R"({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {}})",
       StatusCode::kUnimplemented, "pack-quantized"},
      {R"({"quant_method": "compressed-tensors", "format": "float-quantized"})", StatusCode::kInvalidArgument,
       "config_groups"},
      {R"({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g":
          {"weights": {"num_bits": 4, "type": "int", "strategy": "group"}}}})", StatusCode::kUnimplemented, "4 bits"},
      {R"({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g":
          {"weights": {"num_bits": 8, "type": "float", "strategy": "group"}}}})", StatusCode::kUnimplemented, "'group'"},
      {R"({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g":
          {"weights": {"num_bits": 8, "type": "float", "strategy": "block"}}}})", StatusCode::kInvalidArgument,
       "block_structure"},
      {R"("fp8")", StatusCode::kInvalidArgument, "must be an object"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    Status st = ParseError(c.text);
    EXPECT_EQ(st.code(), c.code) << st.ToString();
    EXPECT_NE(st.message().find(c.names), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("config.json"), std::string::npos) << st.message();
  }
}

TEST(QuantizationConfigTest, RequestedQuantization) {
  const QuantizationConfig none;
  auto online = ResolveQuantization(none, "fp8");
  ASSERT_TRUE(online.ok());
  EXPECT_EQ(online->source, "online");
  EXPECT_EQ(online->block_rows, 1);
  EXPECT_EQ(online->Describe(), "fp8 e4m3 (online; scales per output channel)");
  EXPECT_FALSE(ResolveQuantization(none, "")->enabled());
  EXPECT_FALSE(ResolveQuantization(none, "none")->enabled());
  QuantizationConfig ckpt = Parse(R"({"quant_method": "fp8", "weight_block_size": [128, 128]})");
  EXPECT_EQ(ResolveQuantization(ckpt, "fp8")->source, "fp8");  // the checkpoint's scheme stays
  EXPECT_EQ(ResolveQuantization(ckpt, "")->source, "fp8");
  auto bad = ResolveQuantization(none, "int4");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("fp8"), std::string::npos);
}

}  // namespace
}  // namespace tandem
