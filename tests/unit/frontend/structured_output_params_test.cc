// ParseStructuredOutput (structured_output_params.h): each way of asking lands in
// SamplingParams::structured with the right kind and spec; "text" and absent ask for nothing.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "frontend/structured_output_params.h"

namespace tandem::openai {
namespace {

using grammar::StructuredKind;
using ojson = nlohmann::ordered_json;

SamplingParams Parsed(const std::string& body) {
  SamplingParams p;
  auto e = ParseStructuredOutput(ojson::parse(body), &p);
  EXPECT_FALSE(e.has_value()) << body << ": " << (e ? e->message : "");
  return p;
}

TEST(StructuredOutputParams, EveryFormLandsInTheSamplingParams) {
  EXPECT_EQ(Parsed(R"({})").structured.kind, StructuredKind::kNone);
  EXPECT_EQ(Parsed(R"({"response_format": {"type": "text"}})").structured.kind, StructuredKind::kNone);
  EXPECT_EQ(Parsed(R"({"response_format": {"type": "json_object"}})").structured.kind,
            StructuredKind::kJsonObject);
  SamplingParams s = Parsed(
      R"({"response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": true,
          "schema": {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}}}})");
  EXPECT_EQ(s.structured.kind, StructuredKind::kJsonSchema);
  // The schema's own key order is kept (properties are generated in it).
  EXPECT_EQ(s.structured.spec,
            R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}}})");
  EXPECT_EQ(Parsed(R"({"guided_json": {"type": "integer"}})").structured.spec, R"({"type":"integer"})");
  EXPECT_EQ(Parsed(R"({"guided_json": "{\"type\": \"integer\"}"})").structured.kind,
            StructuredKind::kJsonSchema);
  SamplingParams r = Parsed(R"({"guided_regex": "[a-z]+\\d", "guided_decoding_backend": "xgrammar"})");
  EXPECT_EQ(r.structured.kind, StructuredKind::kRegex);
  EXPECT_EQ(r.structured.spec, "[a-z]+\\d");
  EXPECT_EQ(Parsed(R"({"guided_choice": ["a", "b"]})").structured.spec, R"(["a","b"])");
  EXPECT_EQ(Parsed(R"({"guided_grammar": "root ::= \"x\""})").structured.kind, StructuredKind::kGrammar);
  SamplingParams so = Parsed(R"({"structured_outputs": {"choice": ["y", "n"], "disable_any_whitespace": true}})");
  EXPECT_EQ(so.structured.kind, StructuredKind::kChoice);
  EXPECT_FALSE(so.structured.any_whitespace);
  EXPECT_EQ(Parsed(R"({"structured_outputs": {"json_object": true}})").structured.kind,
            StructuredKind::kJsonObject);
  EXPECT_EQ(Parsed(R"({"structured_outputs": {"json": {"enum": [1, 2]}}})").structured.kind,
            StructuredKind::kJsonSchema);
}

TEST(StructuredOutputParams, ASchemaOverTheLimitIs400) {
  SamplingParams p;
  const std::string body = R"({"guided_regex": ")" + std::string(2 << 20, 'a') + R"("})";
  auto e = ParseStructuredOutput(ojson::parse(body), &p);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, 400);
  EXPECT_NE(e->message.find("over the limit"), std::string::npos) << e->message;
  EXPECT_EQ(p.structured.kind, StructuredKind::kNone);
}

}  // namespace
}  // namespace tandem::openai
