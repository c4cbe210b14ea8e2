// Weight binding and the CPU runner on small synthetic checkpoints of every architecture,
// checked against a plain double-precision forward pass written here from the HF modeling code.
#include "model/weights.h"

#include <cmath>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "model/model_runner.h"
#include "model_files_util.h"

namespace tandem::testing {
namespace {

using nlohmann::json;

struct Synthetic {
  json config;
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> tensors;
};

// hidden 8, 2 query heads and 1 KV head of head_dim 4, MLP 12, 2 layers, vocab 16.
Synthetic MakeModel(const std::string& arch, uint32_t seed) {
  Synthetic m;
  const bool qwen2 = arch == "Qwen2ForCausalLM", qwen3 = arch == "Qwen3ForCausalLM";
  const bool llama = arch == "LlamaForCausalLM";
  m.config = {{"architectures", {arch}}, {"hidden_size", 8}, {"intermediate_size", 12},
              {"num_hidden_layers", 2}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
              {"vocab_size", 16}, {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-6},
              {"rope_theta", 100.0}, {"tie_word_embeddings", qwen3}};
  if (llama) {
    m.config["attention_bias"] = true;  // q, k, v and o biases
    m.config["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  }
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float center = 0.0f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(n);
    for (float& x : v) {  // bf16-representable, so BF16 and F32 files hold the same values
      x = center + u(rng);
      uint32_t b;
      std::memcpy(&b, &x, 4);
      b &= 0xffff0000u;
      std::memcpy(&x, &b, 4);
    }
    m.tensors[name] = {std::move(shape), std::move(v)};
  };
  add("model.embed_tokens.weight", {16, 8});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {8}, 1.0f);
    add(p + "self_attn.q_proj.weight", {8, 8});
    add(p + "self_attn.k_proj.weight", {4, 8});
    add(p + "self_attn.v_proj.weight", {4, 8});
    add(p + "self_attn.o_proj.weight", {8, 8});
    if (qwen2 || llama) {
      add(p + "self_attn.q_proj.bias", {8});
      add(p + "self_attn.k_proj.bias", {4});
      add(p + "self_attn.v_proj.bias", {4});
    }
    if (llama) add(p + "self_attn.o_proj.bias", {8});
    if (qwen3) {
      add(p + "self_attn.q_norm.weight", {4}, 1.0f);
      add(p + "self_attn.k_norm.weight", {4}, 1.0f);
    }
    add(p + "post_attention_layernorm.weight", {8}, 1.0f);
    add(p + "mlp.gate_proj.weight", {12, 8});
    add(p + "mlp.up_proj.weight", {12, 8});
    add(p + "mlp.down_proj.weight", {8, 12});
  }
  add("model.norm.weight", {8}, 1.0f);
  if (!qwen3) add("lm_head.weight", {16, 8});
  return m;
}

void WriteModel(const Synthetic& m, const std::string& dir, const std::string& dtype = "F32",
                bool sharded = false) {
  WriteJson(dir + "/config.json", m.config);
  std::vector<RawTensor> a, b;
  json weight_map = json::object();
  int i = 0;
  for (const auto& [name, t] : m.tensors) {
    RawTensor r = dtype == "BF16" ? Bf16Tensor(name, t.first, t.second)
                                  : F32Tensor(name, t.first, t.second);
    const bool second = sharded && (i++ % 2 == 1);
    weight_map[name] = second ? "b.safetensors" : "a.safetensors";
    (second ? b : a).push_back(std::move(r));
  }
  if (!sharded) {
    WriteSafetensors(dir + "/model.safetensors", a);
    return;
  }
  WriteSafetensors(dir + "/a.safetensors", a);
  WriteSafetensors(dir + "/b.safetensors", b);
  WriteJson(dir + "/model.safetensors.index.json", {{"weight_map", weight_map}});
}

// ---- the plain reference: double precision, one position at a time, full recompute ----
using Vec = std::vector<double>;

Vec MatVec(const std::vector<float>& w, const Vec& x, int out, const std::vector<float>* bias) {
  Vec y(out, 0.0);
  const int in = static_cast<int>(x.size());
  for (int o = 0; o < out; ++o) {
    for (int i = 0; i < in; ++i) y[o] += w[o * in + i] * x[i];
    if (bias) y[o] += (*bias)[o];
  }
  return y;
}

Vec RmsNorm(const Vec& x, const std::vector<float>& w, size_t offset = 0, size_t n = 0) {
  if (n == 0) n = x.size();
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += x[offset + i] * x[offset + i];
  const double r = 1.0 / std::sqrt(ss / n + 1e-6);
  Vec y(x);
  for (size_t i = 0; i < n; ++i) y[offset + i] = x[offset + i] * r * w[i];
  return y;
}

void Rope(Vec& v, int heads, int pos, double factor) {  // head_dim 4, theta 100
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < 2; ++i) {
      const double angle = pos / factor * std::pow(100.0, -2.0 * i / 4.0);
      const double x1 = v[h * 4 + i], x2 = v[h * 4 + i + 2];
      v[h * 4 + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
      v[h * 4 + i + 2] = x2 * std::cos(angle) + x1 * std::sin(angle);
    }
  }
}

// Logits of every position of `ids`: [ids.size()][16].
std::vector<Vec> Reference(const Synthetic& m, const std::vector<int32_t>& ids) {
  const std::string arch = m.config["architectures"][0];
  auto W = [&](const std::string& n) -> const std::vector<float>& { return m.tensors.at(n).second; };
  auto B = [&](const std::string& n) -> const std::vector<float>* {
    auto it = m.tensors.find(n);
    return it == m.tensors.end() ? nullptr : &it->second.second;
  };
  const double factor = arch == "LlamaForCausalLM" ? 2.0 : 1.0;
  const int T = static_cast<int>(ids.size());
  std::vector<Vec> x(T);
  for (int t = 0; t < T; ++t) {
    x[t] = Vec(W("model.embed_tokens.weight").begin() + ids[t] * 8,
               W("model.embed_tokens.weight").begin() + ids[t] * 8 + 8);
  }
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<Vec> q(T), k(T), v(T);
    for (int t = 0; t < T; ++t) {
      const Vec xn = RmsNorm(x[t], W(p + "input_layernorm.weight"));
      q[t] = MatVec(W(p + "self_attn.q_proj.weight"), xn, 8, B(p + "self_attn.q_proj.bias"));
      k[t] = MatVec(W(p + "self_attn.k_proj.weight"), xn, 4, B(p + "self_attn.k_proj.bias"));
      v[t] = MatVec(W(p + "self_attn.v_proj.weight"), xn, 4, B(p + "self_attn.v_proj.bias"));
      if (B(p + "self_attn.q_norm.weight")) {
        for (int h = 0; h < 2; ++h) q[t] = RmsNorm(q[t], W(p + "self_attn.q_norm.weight"), h * 4, 4);
        k[t] = RmsNorm(k[t], W(p + "self_attn.k_norm.weight"), 0, 4);
      }
      Rope(q[t], 2, t, factor);
      Rope(k[t], 1, t, factor);
    }
    for (int t = 0; t < T; ++t) {
      Vec attn(8, 0.0);
      for (int h = 0; h < 2; ++h) {  // both query heads read KV head 0
        Vec s(t + 1);
        double mx = -1e300, sum = 0;
        for (int j = 0; j <= t; ++j) {
          s[j] = 0;
          for (int e = 0; e < 4; ++e) s[j] += q[t][h * 4 + e] * k[j][e];
          s[j] /= 2.0;  // sqrt(4)
          mx = std::max(mx, s[j]);
        }
        for (int j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int j = 0; j <= t; ++j)
          for (int e = 0; e < 4; ++e) attn[h * 4 + e] += s[j] / sum * v[j][e];
      }
      const Vec o = MatVec(W(p + "self_attn.o_proj.weight"), attn, 8, B(p + "self_attn.o_proj.bias"));
      for (int i = 0; i < 8; ++i) x[t][i] += o[i];
      const Vec xn = RmsNorm(x[t], W(p + "post_attention_layernorm.weight"));
      Vec g = MatVec(W(p + "mlp.gate_proj.weight"), xn, 12, nullptr);
      const Vec u = MatVec(W(p + "mlp.up_proj.weight"), xn, 12, nullptr);
      for (int i = 0; i < 12; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      const Vec d = MatVec(W(p + "mlp.down_proj.weight"), g, 8, nullptr);
      for (int i = 0; i < 8; ++i) x[t][i] += d[i];
    }
  }
  const bool tied = !m.tensors.count("lm_head.weight");
  std::vector<Vec> logits(T);
  for (int t = 0; t < T; ++t) {
    logits[t] = MatVec(W(tied ? "model.embed_tokens.weight" : "lm_head.weight"),
                       RmsNorm(x[t], W("model.norm.weight")), 16, nullptr);
  }
  return logits;
}

std::vector<float> RunAll(ModelRunner* r, const std::vector<int32_t>& ids) {
  EXPECT_TRUE(r->AllocateKVCache(4, 3).ok());
  const std::vector<int32_t> table = {2, 0, 3, 1};
  ForwardBatch b;
  SequenceSlice s;
  s.token_ids = ids;
  s.block_table = table;
  s.logits = SequenceSlice::Logits::kAll;
  b.seqs.push_back(s);
  std::vector<float> logits;
  Status st = r->Forward(b, &logits);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return logits;
}

TEST(WeightsTest, EveryArchitectureMatchesThePlainReference) {
  const std::vector<int32_t> ids = {3, 15, 0, 7, 7, 1, 12, 9, 4, 2};
  for (const char* arch :
       {"Qwen3ForCausalLM", "Qwen2ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM"}) {
    const Synthetic m = MakeModel(arch, 42);
    TempDir dir;
    WriteModel(m, dir.path());
    auto runner = LoadCpuModelRunner(dir.path());
    ASSERT_TRUE(runner.ok()) << arch << ": " << runner.status().ToString();
    const std::vector<float> got = RunAll(runner->get(), ids);
    const std::vector<Vec> want = Reference(m, ids);
    ASSERT_EQ(got.size(), ids.size() * 16);
    double max_err = 0;
    for (size_t t = 0; t < ids.size(); ++t)
      for (int i = 0; i < 16; ++i) max_err = std::max(max_err, std::abs(got[t * 16 + i] - want[t][i]));
    EXPECT_LT(max_err, 1e-5) << arch;
  }
}

TEST(WeightsTest, Bf16AndShardedCheckpointsGiveTheSameLogits) {
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5};
  const Synthetic m = MakeModel("Qwen2ForCausalLM", 7);
  TempDir f32, bf16, sharded;
  WriteModel(m, f32.path());
  WriteModel(m, bf16.path(), "BF16");
  WriteModel(m, sharded.path(), "BF16", /*sharded=*/true);
  auto a = LoadCpuModelRunner(f32.path());
  auto b = LoadCpuModelRunner(bf16.path());
  auto c = LoadCpuModelRunner(sharded.path());
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << c.status().ToString();
  const auto la = RunAll(a->get(), ids);
  EXPECT_EQ(la, RunAll(b->get(), ids));
  EXPECT_EQ(la, RunAll(c->get(), ids));
}

TEST(WeightsTest, WrongShapeAndMissingTensorAreNamed) {
  Synthetic m = MakeModel("LlamaForCausalLM", 3);
  {
    Synthetic bad = m;
    bad.tensors["model.layers.1.mlp.up_proj.weight"].first = {8, 12};  // transposed
    TempDir dir;
    WriteModel(bad, dir.path());
    auto r = LoadCpuModelRunner(dir.path());
    ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    const std::string& msg = r.status().message();
    EXPECT_NE(msg.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[8, 12]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[12, 8]"), std::string::npos) << msg;
  }
  {
    Synthetic bad = m;
    bad.tensors.erase("model.layers.0.self_attn.o_proj.bias");
    TempDir dir;
    WriteModel(bad, dir.path());
    auto r = LoadCpuModelRunner(dir.path());
    ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("model.layers.0.self_attn.o_proj.bias"),
              std::string::npos);
  }
  {
    Synthetic bad = m;
    bad.tensors.erase("lm_head.weight");  // untied: required
    TempDir dir;
    WriteModel(bad, dir.path());
    auto r = LoadCpuModelRunner(dir.path());
    ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("lm_head.weight"), std::string::npos);
  }
  {  // a config that disagrees with the checkpoint
    Synthetic bad = m;
    bad.config["intermediate_size"] = 16;
    TempDir dir;
    WriteModel(bad, dir.path());
    EXPECT_EQ(LoadCpuModelRunner(dir.path()).status().code(), StatusCode::kInvalidArgument);
  }
  {
    TempDir dir;
    WriteJson(dir.file("config.json"), m.config);
    EXPECT_EQ(LoadCpuModelRunner(dir.path()).status().code(), StatusCode::kNotFound);
  }
  {  // truncated checkpoint
    TempDir dir;
    WriteModel(m, dir.path());
    std::filesystem::resize_file(dir.file("model.safetensors"),
                                 std::filesystem::file_size(dir.file("model.safetensors")) - 100);
    auto r = LoadCpuModelRunner(dir.path());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("model.safetensors"), std::string::npos);
  }
  TempDir empty;
  EXPECT_EQ(LoadCpuModelRunner(empty.path()).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem::testing
