// LoadKvCacheScales (model/kv_scales.h): the checkpoint's per-layer K / V scales under vLLM's,
// ModelOpt's and AutoFP8's names, broadcast from one value to every KV head or per head, and the
// errors for partial, misshapen and non-positive scales.
#include "model/kv_scales.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model_files_util.h"

namespace tandem {
namespace {

using testing::Bf16Tensor;
using testing::F32Tensor;
using testing::RawTensor;
using testing::TempDir;
using testing::WriteSafetensors;

ModelConfig TwoLayers() {
  ModelConfig c;
  c.num_hidden_layers = 2;
  c.num_key_value_heads = 3;
  return c;
}

Result<KvCacheScales> Load(const std::vector<RawTensor>& tensors) {
  TempDir dir;
  // One unrelated tensor so the file is never empty.
  std::vector<RawTensor> all = tensors;
  all.push_back(F32Tensor("model.norm.weight", {2}, {1.0f, 1.0f}));
  WriteSafetensors(dir.file("model.safetensors"), all);
  auto st = SafetensorsModel::Open(dir.path());
  if (!st.ok()) return st.status();
  return LoadKvCacheScales(*st, TwoLayers());
}

TEST(KvCacheScalesTest, NoScalesIsOneEverywhere) {
  auto s = Load({});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(s->calibrated);
  ASSERT_EQ(s->values.size(), 2u * 2 * 3);
  for (float v : s->values) EXPECT_EQ(v, 1.0f);
}

TEST(KvCacheScalesTest, VllmNamesPerLayerAndPerHead) {
  auto s = Load({F32Tensor("model.layers.0.self_attn.k_scale", {}, {0.5f}),
                 F32Tensor("model.layers.0.self_attn.v_scale", {1}, {0.25f}),
                 Bf16Tensor("model.layers.1.self_attn.k_scale", {3}, {1.0f, 2.0f, 4.0f}),
                 F32Tensor("model.layers.1.self_attn.v_scale", {3}, {0.125f, 3.0f, 0.75f})});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->calibrated);
  const std::vector<float> want{0.5f, 0.5f, 0.5f, 0.25f, 0.25f, 0.25f, 1.0f, 2.0f, 4.0f, 0.125f, 3.0f, 0.75f};
  EXPECT_EQ(s->values, want);
  EXPECT_EQ(s->k(1)[2], 4.0f);
  EXPECT_EQ(s->v(0)[1], 0.25f);
  EXPECT_EQ(s->v(1)[0], 0.125f);
}

TEST(KvCacheScalesTest, ModelOptAndAutoFp8Names) {
  auto s = Load({F32Tensor("model.layers.0.self_attn.k_proj.output_scale", {}, {2.0f}),
                 F32Tensor("model.layers.0.self_attn.v_proj.output_scale", {}, {3.0f}),
                 F32Tensor("model.layers.1.self_attn.kv_scale", {}, {5.0f})});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::vector<float> want{2, 2, 2, 3, 3, 3, 5, 5, 5, 5, 5, 5};
  EXPECT_EQ(s->values, want);
}

TEST(KvCacheScalesTest, BadScalesAreErrorsNamingTheTensor) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    std::vector<RawTensor> tensors;
    std::string needle;
  };
  const std::vector<Case> cases{
      // layer 1 has none
      {{F32Tensor("model.layers.0.self_attn.k_scale", {}, {1.0f}), F32Tensor("model.layers.0.self_attn.v_scale", {}, {1.0f})},
       "1 of 2 layers"},
      // K without V
      {{F32Tensor("model.layers.0.self_attn.k_scale", {}, {1.0f})}, "model.layers.0.self_attn.k_scale"},
      // two values for three heads
      {{F32Tensor("model.layers.0.self_attn.kv_scale", {2}, {1.0f, 1.0f}),
        F32Tensor("model.layers.1.self_attn.kv_scale", {}, {1.0f})},
       "[2]"},
      {{F32Tensor("model.layers.0.self_attn.kv_scale", {}, {0.0f}), F32Tensor("model.layers.1.self_attn.kv_scale", {}, {1.0f})},
       "finite and > 0"},
      {{F32Tensor("model.layers.0.self_attn.kv_scale", {}, {1.0f}), F32Tensor("model.layers.1.self_attn.kv_scale", {}, {nan})},
       "model.layers.1.self_attn.kv_scale"},
  };
  for (const Case& c : cases) {
    auto s = Load(c.tensors);
    ASSERT_FALSE(s.ok()) << c.needle;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.needle), std::string::npos) << s.status().message();
  }
}

}  // namespace
}  // namespace tandem
