// CheckWeightsFit (device_memory_plan.h): Qwen3-8B's bf16 weights against an L40S's memory at
// several --gpu-memory-utilization values, a busy device, a card too small, bad fractions.
#include "model/device_memory_plan.h"

#include <string>

#include <gtest/gtest.h>

namespace tandem {
namespace {

constexpr size_t kMiB = 1u << 20;

// What cudaMemGetInfo reports on an L40S (46068 MiB) and Qwen3-8B's 8.19e9 bf16 parameters.
WeightsFitInput L40s(double utilization) {
  WeightsFitInput in;
  in.model = "Qwen3-8B";
  in.device = "cuda:0 (NVIDIA L40S)";
  in.weights_bytes = 16380000000ull;
  in.reserve_bytes = 600 * kMiB;
  in.gpu_memory_utilization = utilization;
  in.total_bytes = 46068 * kMiB;
  in.free_bytes = 45500 * kMiB;
  return in;
}

bool Has(const Status& st, const std::string& text) {
  return st.message().find(text) != std::string::npos;
}

TEST(WeightsFit, Qwen3_8bFitsAnL40sAtTheDefaultUtilization) {
  EXPECT_TRUE(CheckWeightsFit(L40s(0.9)).ok());
  EXPECT_TRUE(CheckWeightsFit(L40s(0.5)).ok());
}

TEST(WeightsFit, TooSmallAShareNamesTheSizesAndTheLeastThatFits) {
  const Status st = CheckWeightsFit(L40s(0.3));
  ASSERT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Has(st, "Qwen3-8B")) << st.message();
  EXPECT_TRUE(Has(st, "cuda:0 (NVIDIA L40S)")) << st.message();
  EXPECT_TRUE(Has(st, "15.26 GiB")) << st.message();  // 16.38e9 bytes
  EXPECT_TRUE(Has(st, "44.99 GiB")) << st.message();  // the card
  EXPECT_TRUE(Has(st, "13.50 GiB")) << st.message();  // 0.3 of it
  const std::string key = "at least ";
  const size_t at = st.message().find(key);
  ASSERT_NE(at, std::string::npos) << st.message();
  const double least = std::stod(st.message().substr(at + key.size()));
  // The suggestion is the smallest fraction (in hundredths) that fits.
  EXPECT_TRUE(CheckWeightsFit(L40s(least)).ok()) << least;
  EXPECT_FALSE(CheckWeightsFit(L40s(least - 0.01)).ok()) << least;
}

TEST(WeightsFit, ABusyDeviceSaysSo) {
  WeightsFitInput in = L40s(0.9);
  in.free_bytes = 12000 * kMiB;  // another process holds the rest
  const Status st = CheckWeightsFit(in);
  ASSERT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Has(st, "11.72 GiB are free")) << st.message();
  EXPECT_TRUE(Has(st, "free the GPU")) << st.message();
}

TEST(WeightsFit, ACardSmallerThanTheWeights) {
  WeightsFitInput in = L40s(1.0);
  in.total_bytes = in.free_bytes = 15360 * kMiB;  // a 16 GB card
  const Status st = CheckWeightsFit(in);
  ASSERT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Has(st, "a GPU with more memory")) << st.message();
}

TEST(WeightsFit, UtilizationOutOfRange) {
  for (double u : {0.0, -1.0, 1.5}) {
    EXPECT_EQ(CheckWeightsFit(L40s(u)).code(), StatusCode::kInvalidArgument) << u;
  }
}

}  // namespace
}  // namespace tandem
