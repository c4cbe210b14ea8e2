// The chat output parsers (chat_parse/): the first byte picks a tool-call format and a reasoning
// format, the second a split length, the rest is model output. Invariants: every call's arguments
// are JSON and its name is not empty; the output fed in pieces (of the given length) and finished
// gives exactly what the whole text gives, for the tool-call parser and the reasoning parser.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "chat_parse/reasoning.h"
#include "chat_parse/tool_calls.h"

using namespace tandem::chat_parse;

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "tool_call_parse_fuzz: invariant broken: %s\n", what);
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  constexpr ToolCallFormat kFormats[] = {ToolCallFormat::kHermes, ToolCallFormat::kQwen3Coder, ToolCallFormat::kLlama3Json,
                                         ToolCallFormat::kMistral, ToolCallFormat::kPythonic, ToolCallFormat::kNone};
  constexpr ReasoningFormat kReasoning[] = {ReasoningFormat::kQwen3, ReasoningFormat::kDeepSeekR1, ReasoningFormat::kNone};
  const ToolCallFormat format = kFormats[data[0] % 6];
  const ReasoningFormat reasoning = kReasoning[(data[0] / 6) % 3];
  const size_t piece = 1 + data[1] % 16;
  const std::string text(reinterpret_cast<const char*>(data) + 2, size - 2);
  static const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(
      R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}}}}}])");

  const ToolCallDelta whole = ParseToolCalls(format, text, &tools);
  for (const ToolCall& c : whole.calls) {
    Check(!c.name.empty(), "a call without a name");
    Check(!nlohmann::json::parse(c.arguments, nullptr, false).is_discarded(), "arguments that are not JSON");
  }
  ToolCallParser p(format, &tools);
  ToolCallDelta streamed;
  for (size_t i = 0; i < text.size(); i += piece) {
    ToolCallDelta d = p.Feed(std::string_view(text).substr(i, piece));
    streamed.content += d.content;
    for (ToolCall& c : d.calls) streamed.calls.push_back(std::move(c));
  }
  ToolCallDelta d = p.Finish();
  streamed.content += d.content;
  for (ToolCall& c : d.calls) streamed.calls.push_back(std::move(c));
  Check(streamed.content == whole.content, "streamed content differs from the whole text's");
  Check(streamed.calls == whole.calls, "streamed calls differ from the whole text's");

  const ReasoningDelta r = ReasoningParser::Split(reasoning, text);
  ReasoningParser rp(reasoning);
  ReasoningDelta rs;
  for (size_t i = 0; i < text.size(); i += piece) {
    ReasoningDelta x = rp.Feed(std::string_view(text).substr(i, piece));
    rs.reasoning += x.reasoning;
    rs.content += x.content;
  }
  ReasoningDelta x = rp.Finish();
  rs.reasoning += x.reasoning;
  rs.content += x.content;
  Check(rs.reasoning == r.reasoning && rs.content == r.content, "streamed reasoning differs from the whole text's");
  if (reasoning != ReasoningFormat::kNone)
    Check(r.content.find("<think>") == std::string::npos && r.content.find("</think>") == std::string::npos,
          "a think tag in the content");
  return 0;
}
