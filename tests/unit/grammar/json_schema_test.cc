// JsonSchemaToGrammar (json_schema.h) on the schema suite of tests/grammar/schemas.json: for each
// schema, 20 outputs (one per seed) drawn at random under its grammar, byte by byte (any allowed
// byte, closing towards the end after a while), are validated by Python's jsonschema
// (tests/tools/validate_json.py, Debian's python3-jsonschema) and by ajv with ajv-formats
// (tests/tools/validate_ajv.mjs, npm, installed by scripts/test-setup.sh), and parsed by nlohmann.
// Bad schemas are InvalidArgument naming the problem.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grammar/automaton.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace tandem::grammar {
namespace {

using Json = nlohmann::ordered_json;

// One output of the grammar: random allowed bytes; after `relax` bytes, mostly the byte that
// brings the end nearest; the end taken (when allowed) with some chance, always when closing.
std::string RandomOutput(const std::shared_ptr<const Automaton>& a, uint32_t seed, int relax = 120) {
  Matcher m(a);
  std::mt19937 rng(seed);
  std::string out;
  Matcher::State next;
  for (int step = 0; step < 20000; ++step) {
    const bool closing = step > relax && rng() % 8 != 0;
    if (m.IsAccepting() && (m.IsComplete() || closing || rng() % 16 == 0)) return out;
    std::vector<uint8_t> allowed;
    int64_t best = Automaton::kNever;
    std::vector<uint8_t> nearest;
    for (int b = 0; b < 256; ++b) {
      m.Step(m.state(), static_cast<uint8_t>(b), &next);
      if (next.tops.empty() && !next.accepting) continue;
      allowed.push_back(static_cast<uint8_t>(b));
      const int64_t d = m.MinBytesToComplete(next);
      if (d < best) {
        best = d;
        nearest.clear();
      }
      if (d == best) nearest.push_back(static_cast<uint8_t>(b));
    }
    if (allowed.empty()) return out;  // complete, not accepting: the caller's check fails
    const auto& pool = closing ? nearest : allowed;
    const uint8_t b = pool[rng() % pool.size()];
    m.Accept(std::string_view(reinterpret_cast<const char*>(&b), 1));
    out += static_cast<char>(b);
  }
  return out + "<no end>";
}

TEST(JsonSchemaTest, EveryOutputOfTheSuiteValidates) {
  const std::string dir = TANDEM_TESTS_DIR "/grammar";
  std::ifstream in(dir + "/schemas.json");
  ASSERT_TRUE(in) << dir;
  const Json suite = Json::parse(in);
  ASSERT_GE(suite.size(), 60u);
  const auto out_path = std::filesystem::temp_directory_path() /
                        ("tandem-grammar-outputs-" + std::to_string(::getpid()) + ".jsonl");
  std::ofstream out(out_path);
  int outputs = 0;
  for (const Json& c : suite) {
    const std::string name = c["name"];
    auto g = JsonSchemaToGrammar(c["schema"].dump());
    ASSERT_TRUE(g.ok()) << name << ": " << g.status().ToString();
    auto a = Automaton::Compile(*g);
    ASSERT_TRUE(a.ok()) << name << ": " << a.status().ToString();
    // The counts Compile checks before building equal what it built.
    EXPECT_EQ(a->raw_size().nodes, Automaton::CountRaw(*g)->nodes) << name;
    EXPECT_EQ(a->raw_size().byte_edges, Automaton::CountRaw(*g)->byte_edges) << name;
    auto automaton = std::make_shared<const Automaton>(std::move(*a));
    for (uint32_t seed = 0; seed < 20; ++seed) {
      const std::string text = RandomOutput(automaton, seed * 7919 + 1);
      Matcher check(automaton);
      ASSERT_TRUE(check.Accept(text) && check.IsAccepting()) << name << ": " << text;
      EXPECT_TRUE(nlohmann::json::accept(text)) << name << ": " << text;
      out << Json{{"name", name}, {"output", text}}.dump() << "\n";
      ++outputs;
    }
  }
  out.close();
  const std::string tools = TANDEM_TESTS_DIR "/tools";
  const std::string args = " " + dir + "/schemas.json " + out_path.string() + " 2>&1";
  for (const auto& [cmd, summary] :
       {std::pair{"/usr/bin/python3 " + tools + "/validate_json.py" + args, std::string("jsonschema: ")},
        std::pair{"node " + tools + "/validate_ajv.mjs" + args, std::string("ajv: ")}}) {
    FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string said;
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof(buf), p)) said.append(buf, n);
    const int rc = ::pclose(p);
    EXPECT_EQ(rc, 0) << cmd << "\n" << said;
    EXPECT_NE(said.find(summary + std::to_string(outputs) + " outputs"), std::string::npos) << said;
    std::printf("%s", said.c_str());
  }
  std::filesystem::remove(out_path);
}

std::string ErrorOf(const std::string& schema) {
  auto g = JsonSchemaToGrammar(schema);
  if (!g.ok()) return g.status().ToString();
  auto a = Automaton::Compile(*g);
  return a.ok() ? "" : a.status().ToString();
}

TEST(JsonSchemaTest, BadSchemasAreInvalidArgumentNamingTheProblem) {
  EXPECT_NE(ErrorOf("{\"type\": \"string\", \"uniqueItems\": true}").find("'uniqueItems' is not supported"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"not\": {}}").find("'not' is not supported"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"type\": \"integer\", \"multipleOf\": 3}").find("'multipleOf'"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"type\": \"string\", \"format\": \"hostname\"}").find("'hostname' is not supported"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"type\": \"strin\"}").find("unknown type 'strin'"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"type\": \"string\", \"pattern\": \"(a\"}").find("missing ')'"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"type\": \"string\", \"pattern\": \"\\\\1\"}").find("backreferences"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"$ref\": \"#/$defs/nope\"}").find("does not resolve"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"$ref\": \"http://example.com/s.json\"}").find("only local $ref"), std::string::npos);
  EXPECT_NE(ErrorOf("false").find("allows no value"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"enum\": []}").find("non-empty"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}").find("no integer"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"type\": \"number\", \"minimum\": 0.5}").find("not integers"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"oneOf\": [{\"type\": \"number\"}, {\"type\": \"integer\"}]}").find("may overlap"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"type\": \"string\", \"minLength\": 5, \"maxLength\": 2}").find("below"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"allOf": [{"properties": {"a": {}}, "required": ["a"]}], "additionalProperties": false})")
                .find("forbids"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"type\": ").find("not valid JSON"), std::string::npos);
  EXPECT_NE(ErrorOf("[1, 2]").find("object or a boolean"), std::string::npos);
  // 10 MB, and nesting far deeper than the limit: errors, not a crash.
  std::string big = "{\"enum\": [\"" + std::string(10 << 20, 'x') + "\"]}";
  EXPECT_NE(ErrorOf(big).find("over the limit"), std::string::npos);
  std::string deep;
  for (int i = 0; i < 5000; ++i) deep += "{\"type\":\"array\",\"items\":";
  deep += "{}" + std::string(5000, '}');
  EXPECT_NE(ErrorOf(deep).find("nested deeper than 256 levels"), std::string::npos);
  std::string deep64;
  for (int i = 0; i < 70; ++i) deep64 += "{\"type\":\"array\",\"items\":";
  deep64 += "{}" + std::string(70, '}');
  EXPECT_NE(ErrorOf(deep64).find("nested deeper than 64"), std::string::npos);
  std::string deep_const = "{\"const\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_NE(ErrorOf(deep_const).find("nested deeper"), std::string::npos);
  // Found by tests/fuzz/grammar_fuzz.cc: a $ref that is no JSON pointer threw out of the converter.
  EXPECT_NE(ErrorOf(R"({"$ref": "#abc"})").find("does not resolve"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"$defs": {"a": {}}, "$ref": "#/$defs/~2"})").find("does not resolve"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"allOf": [{"$ref": "#x"}]})"), "");
  // Keywords of the wrong shape inside allOf: errors, not exceptions.
  EXPECT_NE(ErrorOf(R"({"allOf": [{"properties": [1, 2]}, {"properties": {"a": {}}}]})"), "");
  EXPECT_NE(ErrorOf(R"({"allOf": [{"required": [1]}], "additionalProperties": false})"), "");
  std::string deep_ref = "{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}";
  EXPECT_NE(ErrorOf(deep_ref), "") << "a $ref cycle with no text in between";
}

}  // namespace
}  // namespace tandem::grammar
