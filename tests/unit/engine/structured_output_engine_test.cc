// Structured outputs through the engine (sampling_params.h `structured`) on the bundled tiny Qwen3
// (random weights: a worst case for a grammar, the model knows no JSON): every output of 20
// bounded schemas of tests/grammar/schemas.json x 3 seeds at temperature 1, batched, ends with
// finish reason "stop" and validates under Python's jsonschema and ajv (tests/tools); a regex,
// a choice and json_object too; a bad schema is InvalidArgument at AddRequest.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "common/file_util.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "model/forwarding_model_runner.h"
#include "model/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace tandem {
namespace {

using testing::RunToCompletion;
using Json = nlohmann::ordered_json;

std::unique_ptr<Engine> MakeEngine() {
  auto tokenizer = Tokenizer::Load(DefaultModelDir());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  auto runner = LoadCpuModelRunner(DefaultModelDir());
  EXPECT_TRUE(runner.ok()) << runner.status().ToString();
  if (!tokenizer.ok() || !runner.ok()) return nullptr;
  EngineConfig c;
  c.num_kv_blocks = 2048;
  c.max_num_seqs = 64;
  auto engine = Engine::Create(std::move(runner).value(), *tokenizer, c);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

// A runner that "samples on its device" (ModelRunner::SamplesOnDevice) over the CPU runner: the
// engine then sends structured rows as kPick with the grammar's bitmask (PickSpec::allowed), and
// the base Execute picks them on the host (PickToken), as the CUDA runner's pick is checked
// against (cuda_runner_check). Counts the masked picks it saw. The masks come only with
// ForwardBatch::prepare_picks, which the base Execute calls after the forward pass; with
// `skip_prepare` it calls Forward and picks itself without it (a runner that forgets the hook).
class DeviceSamplingRunner : public ForwardingModelRunner {
 public:
  DeviceSamplingRunner(std::unique_ptr<ModelRunner> inner, int* masked, bool skip_prepare = false)
      : ForwardingModelRunner(std::move(inner)), masked_(*masked), skip_prepare_(skip_prepare) {}
  bool SamplesOnDevice() const override { return true; }
  Status Execute(const ForwardBatch& batch, ForwardOutput* out) override {
    for (const SequenceSlice& s : batch.seqs) {
      EXPECT_NE(s.logits, SequenceSlice::Logits::kLast);  // (no request here wants logprobs)
      EXPECT_FALSE(s.pick != nullptr && s.pick->has_mask());  // not before the forward pass
    }
    if (skip_prepare_) {
      ForwardBatch b = batch;
      b.prepare_picks = nullptr;
      return ModelRunner::Execute(b, out);
    }
    // Forward (the CPU runner's), prepare_picks, then the picks on the host.
    TANDEM_RETURN_IF_ERROR(ModelRunner::Execute(batch, out));
    for (const SequenceSlice& s : batch.seqs) masked_ += s.pick != nullptr && s.pick->has_mask();
    return Status::Ok();
  }

 private:
  int& masked_;
  bool skip_prepare_;
};

std::string RunCommand(const std::string& cmd) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  std::string said;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), p)) said.append(buf, n);
  said += "\nexit " + std::to_string(::pclose(p));
  return said;
}

TEST(StructuredOutputEngine, EveryOutputOfBoundedSchemasValidatesUnderBothValidators) {
  const std::set<std::string> names = {
      "integer", "number", "boolean", "enum_mixed", "const_object", "string_len", "pattern_phone",
      "format_date", "format_datetime", "format_uuid", "format_ipv4", "int_range",
      "number_exclusive", "array_bounds", "array_of_objects", "anyOf_types", "oneOf_discriminator",
      "ref_defs", "nullable_union", "invoice"};
  std::ifstream in(TANDEM_TESTS_DIR "/grammar/schemas.json");
  ASSERT_TRUE(in);
  const Json suite = Json::parse(in);
  auto engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  auto tokenizer = Tokenizer::Load(DefaultModelDir());
  ASSERT_TRUE(tokenizer.ok());
  const std::vector<int32_t> prompt = (*tokenizer)->Encode("Answer in JSON:");
  Json used = Json::array();
  for (const Json& c : suite) {
    if (!names.count(c["name"])) continue;
    used.push_back(c);
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      SamplingParams p;
      p.temperature = 1.0f;
      p.seed = seed;
      p.max_tokens = 400;
      p.structured = {grammar::StructuredKind::kJsonSchema, c["schema"].dump()};
      const std::string id = c["name"].get<std::string>() + "#" + std::to_string(seed);
      Status st = engine->AddRequest(id, prompt, p);
      ASSERT_TRUE(st.ok()) << id << ": " << st.ToString();
    }
  }
  ASSERT_EQ(used.size(), names.size());
  auto got = RunToCompletion(*engine);
  EXPECT_EQ(engine->Stats().num_kv_blocks_used, 0);
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("tandem-structured-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/schemas.json") << used.dump();
  std::ofstream out(dir + "/outputs.jsonl");
  for (const auto& [id, c] : got) {
    EXPECT_EQ(c.finish_reason, FinishReason::kStop) << id << ": " << c.text;
    out << Json{{"name", id.substr(0, id.find('#'))}, {"output", c.text}}.dump() << "\n";
  }
  out.close();
  ASSERT_EQ(got.size(), names.size() * 3);
  const std::string tools = TANDEM_TESTS_DIR "/tools";
  const std::string args = " " + dir + "/schemas.json " + dir + "/outputs.jsonl";
  const std::string py = RunCommand("/usr/bin/python3 " + tools + "/validate_json.py" + args);
  EXPECT_NE(py.find("jsonschema: 60 outputs of 20 schemas, 0 invalid"), std::string::npos) << py;
  const std::string js = RunCommand("node " + tools + "/validate_ajv.mjs" + args);
  EXPECT_NE(js.find("ajv: 60 outputs of 20 schemas, 0 invalid"), std::string::npos) << js;
  std::filesystem::remove_all(dir);
}

TEST(StructuredOutputEngine, RegexChoiceAndJsonObjectGreedyAndSampled) {
  auto engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  const std::vector<int32_t> prompt = {9707, 11, 1879};
  struct Case {
    grammar::StructuredOutputSpec spec;
    float temperature;
  };
  const std::vector<Case> cases = {
      {{grammar::StructuredKind::kRegex, "[A-Z]{3}-\\d{2,4}"}, 0.0f},
      {{grammar::StructuredKind::kRegex, "(yes|no|maybe)!"}, 1.0f},
      {{grammar::StructuredKind::kChoice, R"(["alpha", "beta", "gamma delta"])"}, 1.0f},
      {{grammar::StructuredKind::kChoice, R"(["alpha", "beta", "gamma delta"])"}, 0.0f},
      {{grammar::StructuredKind::kJsonObject, ""}, 0.0f},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SamplingParams p;
    p.temperature = cases[i].temperature;
    p.seed = 7;
    p.max_tokens = 300;
    p.structured = cases[i].spec;
    ASSERT_TRUE(engine->AddRequest("c" + std::to_string(i), prompt, p).ok());
  }
  auto got = RunToCompletion(*engine);
  const std::string& re1 = got["c0"].text;
  EXPECT_EQ(got["c0"].finish_reason, FinishReason::kStop) << re1;
  EXPECT_TRUE(re1.size() >= 6 && re1.size() <= 8 && re1[3] == '-') << re1;
  EXPECT_TRUE(got["c1"].text == "yes!" || got["c1"].text == "no!" || got["c1"].text == "maybe!")
      << got["c1"].text;
  for (const char* id : {"c2", "c3"}) {
    const std::string& t = got[id].text;
    EXPECT_TRUE(t == "alpha" || t == "beta" || t == "gamma delta") << id << ": " << t;
    EXPECT_EQ(got[id].finish_reason, FinishReason::kStop);
  }
  // json_object: greedy on a random model may run to max_tokens inside a string; whatever came is
  // a prefix the grammar allows, and a finished one parses.
  if (got["c4"].finish_reason == FinishReason::kStop) {
    EXPECT_TRUE(nlohmann::json::accept(got["c4"].text)) << got["c4"].text;
  }
  EXPECT_EQ(got["c4"].text.rfind("{", 0), 0u) << got["c4"].text;
}

// Stop strings and a grammar together: a stop string the grammar reaches ends the request there
// (finish reason stop, the string and what follows it cut, as without a grammar), although the
// grammar is not complete; one it never reaches leaves the grammar to finish the request.
TEST(StructuredOutputEngine, StopStringsCutAStructuredOutput) {
  auto engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  const std::vector<int32_t> prompt = {9707, 11, 1879};
  for (int i = 0; i < 4; ++i) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = 100 + i;
    p.max_tokens = 200;
    p.stop = {";"};
    p.structured = {grammar::StructuredKind::kRegex, "[a-z]{2,6};[a-z]{2,6};[A-Z]{2}"};
    ASSERT_TRUE(engine->AddRequest("cut" + std::to_string(i), prompt, p).ok());
    p.stop = {"zzz;"};  // letters a-y never spell it
    p.structured = {grammar::StructuredKind::kRegex, "[a-y]{2,6};[a-y]{2,6}"};
    ASSERT_TRUE(engine->AddRequest("whole" + std::to_string(i), prompt, p).ok());
  }
  auto got = RunToCompletion(*engine);
  for (int i = 0; i < 4; ++i) {
    const auto& cut = got["cut" + std::to_string(i)];
    EXPECT_EQ(cut.finish_reason, FinishReason::kStop) << cut.text;
    EXPECT_TRUE(cut.text.size() >= 2 && cut.text.size() <= 6 &&
                cut.text.find_first_not_of("abcdefghijklmnopqrstuvwxyz") == std::string::npos)
        << "'" << cut.text << "'";
    const auto& whole = got["whole" + std::to_string(i)];
    EXPECT_EQ(whole.finish_reason, FinishReason::kStop) << whole.text;
    const size_t semi = whole.text.find(';');
    EXPECT_TRUE(semi >= 2 && semi <= 6 && whole.text.size() - semi - 1 >= 2 &&
                whole.text.size() - semi - 1 <= 6 && whole.text.find(';', semi + 1) == std::string::npos)
        << "'" << whole.text << "'";
  }
}

// The device route (kPick + bitmask) gives the host route's outputs token for token, seeded and
// greedy, with penalties too.
TEST(StructuredOutputEngine, DeviceMaskedPicksEqualTheHostRoute) {
  auto tokenizer = Tokenizer::Load(DefaultModelDir());
  ASSERT_TRUE(tokenizer.ok());
  int masked = 0;
  auto device = [&]() -> std::unique_ptr<Engine> {
    auto runner = LoadCpuModelRunner(DefaultModelDir());
    EXPECT_TRUE(runner.ok());
    if (!runner.ok()) return nullptr;
    EngineConfig c;
    c.num_kv_blocks = 2048;
    c.max_num_seqs = 64;
    auto e = Engine::Create(std::make_unique<DeviceSamplingRunner>(std::move(runner).value(), &masked),
                            *tokenizer, c);
    EXPECT_TRUE(e.ok());
    return e.ok() ? std::move(e).value() : nullptr;
  }();
  auto host = MakeEngine();
  ASSERT_NE(device, nullptr);
  ASSERT_NE(host, nullptr);
  const std::vector<int32_t> prompt = {9707, 11, 1879};
  const std::vector<grammar::StructuredOutputSpec> specs = {
      {grammar::StructuredKind::kRegex, "[A-Z]{3}-\\d{2,4}"},
      {grammar::StructuredKind::kChoice, R"(["alpha", "beta", "gamma delta"])"},
      {grammar::StructuredKind::kJsonSchema,
       R"({"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}},
           "required": ["n", "ok"], "additionalProperties": false})"},
      {grammar::StructuredKind::kRegex, "[a-z]{1,8}( [a-z]{1,8}){0,5}"}};
  for (Engine* e : {device.get(), host.get()}) {
    for (size_t i = 0; i < specs.size(); ++i) {
      for (int v = 0; v < 3; ++v) {
        SamplingParams p;
        p.temperature = v == 0 ? 0.0f : 1.0f;
        p.seed = 40 + v;
        p.max_tokens = 120;
        if (v == 2) p.repetition_penalty = 1.3f;
        p.structured = specs[i];
        ASSERT_TRUE(e->AddRequest("r" + std::to_string(i) + "v" + std::to_string(v), prompt, p).ok());
      }
    }
  }
  auto got_device = RunToCompletion(*device);
  auto got_host = RunToCompletion(*host);
  ASSERT_EQ(got_device.size(), specs.size() * 3);
  for (const auto& [id, want] : got_host) {
    EXPECT_EQ(got_device[id].text, want.text) << id;
    EXPECT_EQ(got_device[id].finish_reason, want.finish_reason) << id;
  }
  EXPECT_GE(masked, static_cast<int>(specs.size() * 3));  // every request's picks went masked
}

// A device-sampling runner that never calls prepare_picks would pick structured rows without
// their masks: the engine fails those requests with an error instead of sampling unconstrained.
TEST(StructuredOutputEngine, ARunnerThatSkipsPreparePicksFailsTheStepNotTheGrammar) {
  auto tokenizer = Tokenizer::Load(DefaultModelDir());
  ASSERT_TRUE(tokenizer.ok());
  auto runner = LoadCpuModelRunner(DefaultModelDir());
  ASSERT_TRUE(runner.ok());
  int masked = 0;
  EngineConfig c;
  c.num_kv_blocks = 256;
  auto engine = Engine::Create(
      std::make_unique<DeviceSamplingRunner>(std::move(runner).value(), &masked, true), *tokenizer, c);
  ASSERT_TRUE(engine.ok());
  SamplingParams p;
  p.max_tokens = 16;
  p.structured = {grammar::StructuredKind::kRegex, "[0-9]{3}"};
  ASSERT_TRUE((*engine)->AddRequest("s", {9707, 11, 1879}, p).ok());
  SamplingParams plain;
  plain.max_tokens = 4;
  ASSERT_TRUE((*engine)->AddRequest("plain", {9707, 11}, plain).ok());
  auto got = RunToCompletion(**engine);
  ASSERT_EQ(got.count("s"), 1u);
  EXPECT_EQ(got["s"].finish_reason, FinishReason::kError) << got["s"].text;
  EXPECT_EQ(masked, 0);
  EXPECT_EQ((*engine)->Stats().num_kv_blocks_used, 0);
}

TEST(StructuredOutputEngine, BadSpecsAreInvalidArgumentAtAddRequest) {
  auto engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  SamplingParams p;
  p.structured = {grammar::StructuredKind::kJsonSchema, R"({"type": "string", "format": "hostname"})"};
  Status st = engine->AddRequest("a", {1, 2, 3}, p);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("json_schema"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("hostname"), std::string::npos) << st.ToString();
  p.structured = {grammar::StructuredKind::kRegex, "a(?=b)"};
  EXPECT_NE(engine->AddRequest("b", {1, 2, 3}, p).message().find("lookaround"), std::string::npos);
  p.structured = {grammar::StructuredKind::kGrammar, "root ::= root \"x\""};
  EXPECT_NE(engine->AddRequest("c", {1, 2, 3}, p).message().find("left-recursive"), std::string::npos);
  p.structured = {grammar::StructuredKind::kChoice, "[]"};
  EXPECT_EQ(engine->AddRequest("d", {1, 2, 3}, p).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(engine->HasUnfinishedRequests());
}

}  // namespace
}  // namespace tandem
