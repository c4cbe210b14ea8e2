// The safetensors reader: dtypes, sharded checkpoints, truncated and malformed files.
#include "model/safetensors.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "model_files_util.h"

namespace tandem::testing {
namespace {

TEST(SafetensorsTest, ReadsF32Bf16F16) {
  TempDir dir;
  const std::vector<float> f32 = {1.5f, -2.25f, 3.0e-8f, 65504.0f, -0.0f, 7.0f};
  const std::vector<float> bf = {1.0f, -3.5f, 0.15625f, 1e30f};
  // Half bits: 1.0, -2.0, 65504 (max), smallest subnormal 2^-24, largest subnormal, +inf, 0.5
  const std::vector<uint16_t> half = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x7c00, 0x3800};
  WriteSafetensors(dir.file("model.safetensors"),
                   {F32Tensor("a", {2, 3}, f32), Bf16Tensor("b", {4}, bf),
                    F16Tensor("c", {7}, half), RawTensor{"ids", "I64", {1}, std::string(8, '\1')}});
  auto m = SafetensorsModel::Open(dir.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->num_files(), 1u);
  EXPECT_EQ(m->Names(), std::vector<std::string>({"a", "b", "c", "ids"}));

  std::vector<float> out;
  auto a = m->Find("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->dtype, DType::kF32);
  EXPECT_EQ((*a)->shape, std::vector<int64_t>({2, 3}));
  ASSERT_TRUE(TensorToFloat(**a, &out).ok());
  EXPECT_EQ(out, f32);

  auto b = m->Find("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->dtype, DType::kBF16);
  ASSERT_TRUE(TensorToFloat(**b, &out).ok());
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.5f);
  EXPECT_EQ(out[2], 0.15625f);
  EXPECT_NEAR(out[3], 1e30f, 1e28f);  // rounded to bf16

  auto c = m->Find("c");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(TensorToFloat(**c, &out).ok());
  ASSERT_EQ(out.size(), 7u);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 65504.0f);
  EXPECT_EQ(out[3], std::ldexp(1.0f, -24));
  EXPECT_EQ(out[4], 1023.0f * std::ldexp(1.0f, -24));
  EXPECT_EQ(out[5], std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[6], 0.5f);
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_EQ(HalfToFloat(0x8000), -0.0f);
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));

  auto ids = m->Find("ids");
  ASSERT_TRUE(ids.ok());
  Status st = TensorToFloat(**ids, &out);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_NE(st.message().find("I64"), std::string::npos);
  EXPECT_NE(st.message().find("ids"), std::string::npos);

  EXPECT_EQ(m->Find("nope").status().code(), StatusCode::kNotFound);
}

TEST(SafetensorsTest, ShardedWithIndex) {
  TempDir dir;
  WriteSafetensors(dir.file("model-00001-of-00002.safetensors"),
                   {F32Tensor("x", {2}, {1.0f, 2.0f}), F32Tensor("y", {1}, {3.0f})});
  WriteSafetensors(dir.file("model-00002-of-00002.safetensors"),
                   {F32Tensor("z", {3}, {4.0f, 5.0f, 6.0f})});
  WriteJson(dir.file("model.safetensors.index.json"),
            {{"metadata", {{"total_size", 24}}},
             {"weight_map",
              {{"x", "model-00001-of-00002.safetensors"},
               {"y", "model-00001-of-00002.safetensors"},
               {"z", "model-00002-of-00002.safetensors"}}}});
  auto m = SafetensorsModel::Open(dir.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->num_files(), 2u);
  std::vector<float> out;
  ASSERT_TRUE(TensorToFloat(**m->Find("z"), &out).ok());
  EXPECT_EQ(out, std::vector<float>({4.0f, 5.0f, 6.0f}));
  ASSERT_TRUE(TensorToFloat(**m->Find("x"), &out).ok());
  EXPECT_EQ(out, std::vector<float>({1.0f, 2.0f}));
  EXPECT_NE((*m->Find("z"))->file.find("00002"), std::string::npos);

  // The index names a tensor its shard lacks: DataLoss naming both.
  WriteJson(dir.file("model.safetensors.index.json"),
            {{"weight_map", {{"w", "model-00002-of-00002.safetensors"}}}});
  auto bad = SafetensorsModel::Open(dir.path());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("w"), std::string::npos);
  // A shard that does not exist: NotFound naming it.
  WriteJson(dir.file("model.safetensors.index.json"),
            {{"weight_map", {{"x", "model-00009-of-00009.safetensors"}}}});
  auto missing = SafetensorsModel::Open(dir.path());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("00009"), std::string::npos);
}

TEST(SafetensorsTest, TruncatedAndMalformedFiles) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  WriteSafetensors(path, {F32Tensor("a", {4}, {1, 2, 3, 4}), F32Tensor("b", {4}, {5, 6, 7, 8})});
  std::string full;
  {
    std::ifstream in(path, std::ios::binary);
    full.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto expect = [&](const std::string& bytes, StatusCode code, const char* what) {
    WriteText(path, bytes);
    auto f = SafetensorsFile::Open(path);
    ASSERT_FALSE(f.ok()) << what;
    EXPECT_EQ(f.status().code(), code) << what << ": " << f.status().ToString();
    EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().ToString();
  };
  expect(full.substr(0, full.size() - 1), StatusCode::kDataLoss, "last byte cut");
  expect(full.substr(0, full.size() - 17), StatusCode::kDataLoss, "a whole tensor cut");
  expect(full.substr(0, 20), StatusCode::kDataLoss, "header cut");
  expect(full.substr(0, 5), StatusCode::kDataLoss, "shorter than the length prefix");
  std::string garbage = full;
  garbage[8] = '#';
  expect(garbage, StatusCode::kInvalidArgument, "header not JSON");

  // A dtype/shape that disagrees with its byte range.
  RawTensor wrong{"a", "F32", {3}, std::string(16, '\0')};
  WriteSafetensors(path, {wrong});
  EXPECT_EQ(SafetensorsFile::Open(path).status().code(), StatusCode::kDataLoss);

  TempDir none;
  EXPECT_EQ(SafetensorsModel::Open(none.path()).status().code(), StatusCode::kNotFound);
}

TEST(SafetensorsTest, RealCheckpointHeader) {
  auto m = SafetensorsModel::Open(DefaultModelDir());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto e = m->Find("model.embed_tokens.weight");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)->dtype, DType::kBF16);
  EXPECT_EQ((*e)->shape, std::vector<int64_t>({151936, 256}));
  EXPECT_FALSE(m->Contains("lm_head.weight"));  // tied
}

}  // namespace
}  // namespace tandem::testing
