// FP8 linear weights at load (weights.h BindLinear): scales per block, output channel and tensor
// from F32/BF16 scale tensors, --quantization fp8 on an unquantized weight, and the errors a bad
// FP8 checkpoint gets (a missing, misshapen or non-finite scale; F8_E4M3 without a config).
#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "kernels/cpu/fp8.h"
#include "model/weights.h"
#include "model_files_util.h"

namespace tandem::testing {
namespace {

RawTensor Fp8Tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<uint8_t>& codes) {
  return RawTensor{name, "F8_E4M3", std::move(shape), std::string(codes.begin(), codes.end())};
}

std::vector<uint8_t> RandomCodes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> codes(n);
  for (uint8_t& c : codes) {
    do c = static_cast<uint8_t>(rng()); while ((c & 0x7f) == 0x7f);  // no NaN
  }
  return codes;
}

QuantizationConfig Blocks(int64_t r, int64_t c, const std::string& suffix = "weight_scale") {
  QuantizationConfig q;
  q.method = QuantizationConfig::Method::kFp8;
  q.source = "test";
  q.block_rows = r;
  q.block_cols = c;
  q.scale_suffix = suffix;
  return q;
}

struct Checkpoint {
  TempDir dir;
  SafetensorsModel st;
};

std::unique_ptr<Checkpoint> Write(const std::vector<RawTensor>& tensors) {
  auto c = std::make_unique<Checkpoint>();
  WriteSafetensors(c->dir.file("model.safetensors"), tensors);
  auto st = SafetensorsModel::Open(c->dir.path());
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  c->st = std::move(st).value();
  return c;
}

// [5, 7] in blocks of [2, 4]: a 3 x 2 grid with ragged last blocks, F32 and BF16 scales.
TEST(Fp8WeightsTest, BlockScales) {
  const std::vector<uint8_t> codes = RandomCodes(35, 1);
  const std::vector<float> scales = {0.5f, 2.0f, 0.25f, 1.5f, 3.0f, 0.125f};
  for (const bool bf16 : {false, true}) {
    auto ck = Write({Fp8Tensor("m.x.weight", {5, 7}, codes),
                     bf16 ? Bf16Tensor("m.x.weight_scale_inv", {3, 2}, scales) : F32Tensor("m.x.weight_scale_inv", {3, 2}, scales)});
    MatrixWeight bound;
    ASSERT_TRUE(BindLinear(ck->st, "m.x.weight", {5, 7}, Blocks(2, 4, "weight_scale_inv"), &bound).ok());
    const std::vector<float> w = bound.ToFloat();
    ASSERT_EQ(w.size(), 35u);
    for (int r = 0; r < 5; ++r) {
      for (int c = 0; c < 7; ++c) {
        EXPECT_EQ(w[r * 7 + c], cpu::Fp8E4M3ToFloat(codes[r * 7 + c]) * scales[(r / 2) * 2 + c / 4]) << r << "," << c;
      }
    }
  }
}

TEST(Fp8WeightsTest, ChannelAndTensorScalesInEitherShape) {
  const std::vector<uint8_t> codes = RandomCodes(12, 2);
  const std::vector<float> per_row = {0.5f, 2.0f, 4.0f};
  for (std::vector<int64_t> shape : {std::vector<int64_t>{3, 1}, std::vector<int64_t>{3}}) {
    auto ck = Write({Fp8Tensor("x.weight", {3, 4}, codes), F32Tensor("x.weight_scale", shape, per_row)});
    MatrixWeight bound;
    ASSERT_TRUE(BindLinear(ck->st, "x.weight", {3, 4}, Blocks(1, 0), &bound).ok());
    const std::vector<float> w = bound.ToFloat();
    for (int k = 0; k < 12; ++k) EXPECT_EQ(w[k], cpu::Fp8E4M3ToFloat(codes[k]) * per_row[k / 4]);
  }
  for (std::vector<int64_t> shape : {std::vector<int64_t>{}, std::vector<int64_t>{1}, std::vector<int64_t>{1, 1}}) {
    auto ck = Write({Fp8Tensor("x.weight", {3, 4}, codes), F32Tensor("x.weight_scale", shape, {0.75f})});
    MatrixWeight bound;
    ASSERT_TRUE(BindLinear(ck->st, "x.weight", {3, 4}, Blocks(0, 0), &bound).ok()) << ShapeString(shape);
    const std::vector<float> w = bound.ToFloat();
    for (int k = 0; k < 12; ++k) EXPECT_EQ(w[k], cpu::Fp8E4M3ToFloat(codes[k]) * 0.75f);
  }
}

// An unquantized weight is read as stored, quantized or not; --quantization fp8 ("online")
// quantizes it per output channel.
TEST(Fp8WeightsTest, UnquantizedAndOnline) {
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.0f, 0.05f);
  std::vector<float> v(6 * 16);
  for (float& x : v) x = n(rng);
  auto ck = Write({F32Tensor("x.weight", {6, 16}, v)});
  MatrixWeight bound;
  ASSERT_TRUE(BindLinear(ck->st, "x.weight", {6, 16}, Blocks(128, 128), &bound).ok());
  EXPECT_EQ(bound.ToFloat(), v);
  EXPECT_TRUE(bound.owned.empty());  // F32 in place in the mapping
  EXPECT_EQ(bound.matrix().type, cpu::WeightType::kF32);
  QuantizationConfig online = Blocks(1, 0);
  online.source = "online";
  ASSERT_TRUE(BindLinear(ck->st, "x.weight", {6, 16}, online, &bound).ok());
  const std::vector<float> w = bound.ToFloat();
  std::vector<uint8_t> codes(v.size());
  std::vector<float> scales(6), want(v.size());
  cpu::QuantizeFp8E4M3PerRow(v.data(), 6, 16, codes.data(), scales.data());
  cpu::DequantizeFp8E4M3(codes.data(), 6, 16, scales.data(), 1, 16, want.data());
  EXPECT_EQ(w, want);
  EXPECT_NE(w, v);
}

TEST(Fp8WeightsTest, BadFp8CheckpointsAreClearErrors) {
  const std::vector<uint8_t> codes = RandomCodes(12, 4);
  MatrixWeight w;
  {
    auto ck = Write({Fp8Tensor("x.weight", {3, 4}, codes)});
    Status st = BindLinear(ck->st, "x.weight", {3, 4}, Blocks(1, 0), &w);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("no scale tensor x.weight_scale"), std::string::npos) << st.message();
    st = BindLinear(ck->st, "x.weight", {3, 4}, QuantizationConfig(), &w);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("no quantization_config"), std::string::npos) << st.message();
  }
  {
    auto ck = Write({Fp8Tensor("x.weight", {3, 4}, codes), F32Tensor("x.weight_scale_inv", {2, 1}, {1.0f, 1.0f})});
    Status st = BindLinear(ck->st, "x.weight", {3, 4}, Blocks(128, 128, "weight_scale_inv"), &w);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("has shape [2, 1]"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("needs [1, 1]"), std::string::npos) << st.message();
  }
  {
    auto ck = Write({Fp8Tensor("x.weight", {3, 4}, codes), F32Tensor("x.weight_scale", {3, 1}, {1.0f, NAN, 1.0f})});
    Status st = BindLinear(ck->st, "x.weight", {3, 4}, Blocks(1, 0), &w);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("holds nan"), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace tandem::testing
