// The CUDA loader's plan (weight_plan.h), run on the host: the bf16 images it stages for each
// device tensor must equal LoadModelWeights' fp32 tensors rounded to bf16 (by the test's own
// rounding, model_files_util.h) and fused as cuda_weights.h says, on the bundled model (BF16) and
// on synthetic F32 / F16 / sharded checkpoints; its errors must be LoadModelWeights' errors.
#include "model/weight_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "model/weights.h"
#include "model_files_util.h"

namespace tandem::testing {
namespace {

using nlohmann::json;

// Runs the staging schedule into host "device" tensors, checking every element is written once.
std::map<std::string, std::vector<uint16_t>> Stage(const WeightPlan& plan, size_t chunk_bytes,
                                                   int threads) {
  std::map<std::string, std::vector<uint16_t>> image;
  std::map<std::string, std::vector<int>> writes;
  for (const DeviceTensorPlan* t : plan.tensors()) {
    image[t->name].assign(t->num_elements, 0xdead);
    writes[t->name].assign(t->num_elements, 0);
  }
  for (const StagingChunk& chunk : ScheduleStaging(plan, chunk_bytes)) {
    EXPECT_LE(chunk.bytes, chunk_bytes);
    std::vector<uint16_t> buffer(chunk.bytes / 2, 0xbeef);
    FillStagingChunk(chunk, buffer.data(), threads);
    ReleaseChunkSources(chunk);  // as the loader does: later chunks fault shared pages back in
    for (const StagingPiece& p : chunk.pieces) {
      EXPECT_LE(p.staging_offset + p.count * 2, chunk.bytes);
      std::vector<uint16_t>& dst = image[p.tensor->name];
      std::vector<int>& count = writes[p.tensor->name];
      if (p.dst_offset < 0 || p.dst_offset + p.count > static_cast<int64_t>(dst.size())) {
        ADD_FAILURE() << p.tensor->name << ": piece beyond the tensor";
        continue;
      }
      for (int64_t i = 0; i < p.count; ++i) {
        dst[p.dst_offset + i] = buffer[p.staging_offset / 2 + i];
        ++count[p.dst_offset + i];
      }
    }
  }
  for (const auto& [name, w] : writes) {
    EXPECT_EQ(std::count(w.begin(), w.end(), 1), static_cast<long>(w.size())) << name;
  }
  return image;
}

std::vector<uint16_t> Rounded(std::initializer_list<std::vector<float>> parts) {
  std::vector<uint16_t> out;
  for (const auto& p : parts) {
    for (float v : p) out.push_back(FloatToBf16Bits(v));
  }
  return out;
}

// Every device tensor against LoadModelWeights, rounded and fused here.
void ExpectMatchesLoadModelWeights(const std::string& dir, size_t chunk_bytes, int threads) {
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto opened = SafetensorsModel::Open(dir);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const auto st = std::make_shared<const SafetensorsModel>(std::move(opened).value());
  auto plan = PlanBf16Weights(*st, *config);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  auto w = LoadModelWeights(st, *config);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto image = Stage(*plan, chunk_bytes, threads);

  std::map<std::string, std::vector<uint16_t>> expected;
  expected["embed"] = Rounded({w->embed.ToFloat()});
  expected["final_norm"] = Rounded({w->final_norm});
  if (!w->lm_head.empty()) expected["lm_head"] = Rounded({w->lm_head.ToFloat()});
  for (size_t i = 0; i < w->layers.size(); ++i) {
    const LayerWeights& l = w->layers[i];
    const std::string n = "layers." + std::to_string(i) + ".";
    expected[n + "input_norm"] = Rounded({l.input_norm});
    expected[n + "qkv"] = Rounded({l.q_proj.ToFloat(), l.k_proj.ToFloat(), l.v_proj.ToFloat()});
    if (!l.q_bias.empty()) expected[n + "qkv_bias"] = Rounded({l.q_bias, l.k_bias, l.v_bias});
    expected[n + "o"] = Rounded({l.o_proj.ToFloat()});
    if (!l.o_bias.empty()) expected[n + "o_bias"] = Rounded({l.o_bias});
    if (!l.q_norm.empty()) expected[n + "q_norm"] = Rounded({l.q_norm});
    if (!l.k_norm.empty()) expected[n + "k_norm"] = Rounded({l.k_norm});
    expected[n + "post_norm"] = Rounded({l.post_norm});
    expected[n + "gate_up"] = Rounded({l.gate_proj.ToFloat(), l.up_proj.ToFloat()});
    expected[n + "down"] = Rounded({l.down_proj.ToFloat()});
  }
  ASSERT_EQ(image.size(), expected.size());
  size_t total = 0;
  for (const auto& [name, want] : expected) {
    ASSERT_TRUE(image.count(name)) << name;
    EXPECT_TRUE(image[name] == want) << name;
    total += want.size() * 2;
  }
  EXPECT_EQ(plan->total_bytes(), total);
  EXPECT_EQ(plan->lm_head.parts.empty(), config->tie_word_embeddings);
}

TEST(WeightPlan, BundledModelStagedInSmallChunksEqualsLoadModelWeights) {
  // 1 MiB + 6 bytes: the 77 MiB embedding and every fused tensor cross chunk boundaries.
  ExpectMatchesLoadModelWeights(DefaultModelDir(), (1u << 20) + 6, /*threads=*/3);
}

TEST(WeightPlan, BundledModelInOneChunkPerTensorAndOneThread) {
  ExpectMatchesLoadModelWeights(DefaultModelDir(), 256u << 20, /*threads=*/1);
}

// hidden 8, 2 query heads / 1 KV head of 4, MLP 12, 2 layers, vocab 16; values not representable
// in bf16 (F32 rounding is exercised, ties included), optionally sharded.
json SyntheticConfig(const std::string& arch) {
  const bool qwen3 = arch == "Qwen3ForCausalLM";
  json c = {{"architectures", {arch}}, {"hidden_size", 8}, {"intermediate_size", 12},
            {"num_hidden_layers", 2}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
            {"vocab_size", 16}, {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-6},
            {"rope_theta", 100.0}, {"tie_word_embeddings", qwen3}};
  if (arch == "LlamaForCausalLM") c["attention_bias"] = true;
  return c;
}

std::map<std::string, std::vector<int64_t>> SyntheticShapes(const std::string& arch) {
  const bool qwen3 = arch == "Qwen3ForCausalLM", llama = arch == "LlamaForCausalLM";
  const bool bias = arch == "Qwen2ForCausalLM" || llama;
  std::map<std::string, std::vector<int64_t>> s;
  s["model.embed_tokens.weight"] = {16, 8};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    s[p + "input_layernorm.weight"] = {8};
    s[p + "self_attn.q_proj.weight"] = {8, 8};
    s[p + "self_attn.k_proj.weight"] = {4, 8};
    s[p + "self_attn.v_proj.weight"] = {4, 8};
    s[p + "self_attn.o_proj.weight"] = {8, 8};
    if (bias) {
      s[p + "self_attn.q_proj.bias"] = {8};
      s[p + "self_attn.k_proj.bias"] = {4};
      s[p + "self_attn.v_proj.bias"] = {4};
    }
    if (llama) s[p + "self_attn.o_proj.bias"] = {8};
    if (qwen3) {
      s[p + "self_attn.q_norm.weight"] = {4};
      s[p + "self_attn.k_norm.weight"] = {4};
    }
    s[p + "post_attention_layernorm.weight"] = {8};
    s[p + "mlp.gate_proj.weight"] = {12, 8};
    s[p + "mlp.up_proj.weight"] = {12, 8};
    s[p + "mlp.down_proj.weight"] = {8, 12};
  }
  s["model.norm.weight"] = {8};
  if (!qwen3) s["lm_head.weight"] = {16, 8};
  return s;
}

// dtype F32: random floats, some exactly halfway between two bf16 values; F16: random halves.
void WriteSynthetic(const std::string& dir, const std::string& arch, const std::string& dtype,
                    bool sharded, uint32_t seed) {
  WriteJson(dir + "/config.json", SyntheticConfig(arch));
  std::mt19937 rng(seed);
  std::vector<RawTensor> a, b;
  json weight_map = json::object();
  int i = 0;
  for (const auto& [name, shape] : SyntheticShapes(arch)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    RawTensor t;
    if (dtype == "F16") {
      std::vector<uint16_t> bits(n);
      for (auto& h : bits) h = static_cast<uint16_t>(rng() & 0x7bffu);  // finite halves
      t = F16Tensor(name, shape, bits);
    } else {
      std::vector<float> v(n);
      for (float& x : v) {
        uint32_t bits = 0x3c000000u + (rng() & 0x03ffffffu);
        if (rng() % 4 == 0) bits = (bits & 0xffff0000u) | 0x8000u;  // a tie
        if (rng() % 2) bits |= 0x80000000u;
        std::memcpy(&x, &bits, 4);
      }
      t = F32Tensor(name, shape, v);
    }
    const bool second = sharded && (i++ % 2 == 1);
    weight_map[name] = second ? "b.safetensors" : "a.safetensors";
    (second ? b : a).push_back(std::move(t));
  }
  if (!sharded) {
    WriteSafetensors(dir + "/model.safetensors", a);
    return;
  }
  WriteSafetensors(dir + "/a.safetensors", a);
  WriteSafetensors(dir + "/b.safetensors", b);
  WriteJson(dir + "/model.safetensors.index.json", {{"weight_map", weight_map}});
}

TEST(WeightPlan, SyntheticCheckpointsOfEveryArchitectureAndDtype) {
  for (const std::string arch :
       {"Qwen3ForCausalLM", "Qwen2ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM"}) {
    for (const std::string dtype : {"F32", "F16"}) {
      for (bool sharded : {false, true}) {
        SCOPED_TRACE(arch + " " + dtype + (sharded ? " sharded" : ""));
        TempDir dir;
        WriteSynthetic(dir.path(), arch, dtype, sharded, 11);
        for (size_t chunk : {size_t{2}, size_t{34}, size_t{1} << 20}) {
          ExpectMatchesLoadModelWeights(dir.path(), chunk, /*threads=*/4);
        }
      }
    }
  }
}

TEST(WeightPlan, RoundingMatchesTheReferenceIncludingSpecials) {
  std::mt19937 rng(3);
  for (int i = 0; i < 100000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (!std::isfinite(f)) continue;
    ASSERT_EQ(FloatToBfloat16Bits(f), FloatToBf16Bits(f)) << bits;
  }
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToBfloat16Bits(inf), 0x7f80);
  EXPECT_EQ(FloatToBfloat16Bits(-inf), 0xff80);
  const uint16_t nan = FloatToBfloat16Bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x007f, 0);
  uint32_t snan_bits = 0x7f800001u;  // a NaN whose rounding would carry into inf
  float snan;
  std::memcpy(&snan, &snan_bits, 4);
  EXPECT_NE(FloatToBfloat16Bits(snan) & 0x007f, 0);
  EXPECT_EQ(FloatToBfloat16Bits(3.3895314e38f), 0x7f7f);  // the largest bf16
  EXPECT_EQ(FloatToBfloat16Bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
}

TEST(WeightPlan, ErrorsAreLoadModelWeightsErrors) {
  const std::string arch = "Qwen2ForCausalLM";
  auto expect_same = [](const std::string& dir) {
    auto config = LoadModelConfig(dir);
    ASSERT_TRUE(config.ok());
    auto opened = SafetensorsModel::Open(dir);
    ASSERT_TRUE(opened.ok());
    const auto st = std::make_shared<const SafetensorsModel>(std::move(opened).value());
    const Status cpu = LoadModelWeights(st, *config).status();
    const Status plan = PlanBf16Weights(*st, *config).status();
    EXPECT_FALSE(plan.ok());
    EXPECT_EQ(plan.code(), cpu.code());
    EXPECT_EQ(plan.message(), cpu.message());
  };
  {  // a missing tensor
    TempDir dir;
    WriteJson(dir.file("config.json"), SyntheticConfig(arch));
    std::vector<RawTensor> t;
    for (const auto& [name, shape] : SyntheticShapes(arch)) {
      if (name == "model.layers.1.self_attn.k_proj.bias") continue;
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      t.push_back(F32Tensor(name, shape, std::vector<float>(n, 0.5f)));
    }
    WriteSafetensors(dir.file("model.safetensors"), t);
    expect_same(dir.path());
  }
  {  // a wrong shape, and an unsupported dtype
    for (const std::string bad : {"shape", "dtype"}) {
      TempDir dir;
      WriteJson(dir.file("config.json"), SyntheticConfig(arch));
      std::vector<RawTensor> t;
      for (auto [name, shape] : SyntheticShapes(arch)) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        RawTensor r = F32Tensor(name, shape, std::vector<float>(n, 0.5f));
        if (name == "model.layers.0.mlp.up_proj.weight") {
          if (bad == "shape") r.shape = {8, 12};
          if (bad == "dtype") r.dtype = "I32";
        }
        t.push_back(std::move(r));
      }
      WriteSafetensors(dir.file("model.safetensors"), t);
      SCOPED_TRACE(bad);
      expect_same(dir.path());
    }
  }
}

}  // namespace
}  // namespace tandem::testing
