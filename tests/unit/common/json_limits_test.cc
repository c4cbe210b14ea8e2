#include "common/json_limits.h"

#include <string>

#include <gtest/gtest.h>

namespace tandem {
namespace {

std::string ObjectOfKeys(int n, const std::string& prefix = "k") {
  std::string s = "{";
  for (int i = 0; i < n; ++i) s += (i ? ",\"" : "\"") + prefix + std::to_string(i) + "\":" + std::to_string(i);
  return s + "}";
}

// The parsed value equals nlohmann's own parse, key order included, within the limits.
TEST(JsonLimits, WithinTheLimitsTheValueIsNlohmannsOwn) {
  const std::string text = R"({"b":[1,{"z":2,"a":[true,null]}],"a":"x","c":{"k":{"j":1.5}}})";
  BoundedJson p = ParseBoundedJson(text, 8);
  ASSERT_EQ(p.error, JsonParseError::kNone);
  EXPECT_EQ(p.value, nlohmann::ordered_json::parse(text));
  EXPECT_EQ(p.value.dump(), nlohmann::ordered_json::parse(text).dump());  // member order kept
  EXPECT_EQ(ParseBoundedJson("{\"a\":", 8).error, JsonParseError::kInvalid);
  EXPECT_TRUE(ParseBoundedJson("[1,", 8).value.is_discarded());
}

// Depth: the top-level value is depth 0; an array or object starting at max_depth is too deep.
TEST(JsonLimits, ContainersAtMaxDepthAreTooDeep) {
  auto nested = [](int n) { return std::string(n, '[') + std::string(n, ']'); };
  EXPECT_EQ(ParseBoundedJson(nested(4), 4).error, JsonParseError::kNone);
  EXPECT_EQ(ParseBoundedJson(nested(5), 4).error, JsonParseError::kTooDeep);
  EXPECT_EQ(ParseBoundedJson(nested(100000), 0).error, JsonParseError::kNone);  // no depth limit
  EXPECT_TRUE(ParseBoundedJson(nested(5), 4).value.is_discarded());
}

// An object of n keys costs n (n - 1) / 2 comparisons; objects count together, each from its own
// first key (nested objects included).
TEST(JsonLimits, KeyComparisonsAreCountedPerObjectAndSummed) {
  const uint64_t c100 = 100 * 99 / 2;
  EXPECT_EQ(ParseBoundedJson(ObjectOfKeys(100), 0, c100).error, JsonParseError::kNone);
  EXPECT_EQ(ParseBoundedJson(ObjectOfKeys(101), 0, c100).error, JsonParseError::kTooManyKeys);
  const std::string two = "[" + ObjectOfKeys(100) + "," + ObjectOfKeys(100) + "]";
  EXPECT_EQ(ParseBoundedJson(two, 0, 2 * c100).error, JsonParseError::kNone);
  EXPECT_EQ(ParseBoundedJson(two, 0, 2 * c100 - 1).error, JsonParseError::kTooManyKeys);
  // An object inside another: the inner one's keys do not count against the outer's.
  const std::string inner = "{\"a\":" + ObjectOfKeys(100) + ",\"b\":1,\"c\":2}";
  EXPECT_EQ(ParseBoundedJson(inner, 0, c100 + 3).error, JsonParseError::kNone);
  EXPECT_EQ(ParseBoundedJson(inner, 0, c100 + 2).error, JsonParseError::kTooManyKeys);
  // Keys of 16 bytes or more count 1 + size / 16 a comparison: 40-byte keys, 3.
  const std::string pad(38, 'x');
  EXPECT_EQ(ParseBoundedJson(ObjectOfKeys(100, pad), 0, 3 * c100).error, JsonParseError::kNone);
  EXPECT_EQ(ParseBoundedJson(ObjectOfKeys(100, pad), 0, 3 * c100 - 1).error, JsonParseError::kTooManyKeys);
  // The default allows one object of 11,585 keys, not 11,586.
  EXPECT_EQ(ParseBoundedJson(ObjectOfKeys(11585), 0).error, JsonParseError::kNone);
  BoundedJson over = ParseBoundedJson(ObjectOfKeys(11586), 0);
  EXPECT_EQ(over.error, JsonParseError::kTooManyKeys);
  EXPECT_TRUE(over.value.is_discarded());
}

}  // namespace
}  // namespace tandem
