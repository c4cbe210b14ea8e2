// Chat templates (chat/template.h). The first byte picks:
//   even: the rest is a template: Parse, and when it parses, Render with a context like the one
//         ChatRenderer passes (messages, tools, add_generation_prompt, bos/eos tokens);
//   odd:  the rest is the JSON of a request's messages, rendered by the bundled model's template
//         (ChatRenderer: the special-token placeholders, the literal ranges).
// Invariants: errors carry a message; the literal ranges of a rendering are sorted,
// non-overlapping and inside its text.
// Templates render with 1/64 of the production limits (kFuzzLimits): the same code paths and
// errors, but a template that grows a string or its output to the cap costs 1/64 as much (under
// ASan and coverage, `upper` over a 16 MiB string took 5-7 s, and the run averaged 23 exec/s).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/template.h"

using namespace tandem;
using ojson = nlohmann::ordered_json;

namespace {

const ChatTemplateLimits kFuzzLimits = [] {
  ChatTemplateLimits l;
  l.max_string_bytes /= 64;    // 256 KiB
  l.max_output_bytes /= 64;    // 256 KiB
  l.max_iterated_items /= 64;  // 16 Ki
  l.max_steps /= 64;           // 32 Ki (a render of the Qwen3 template over the context: < 1 Ki)
  return l;
}();

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "chat_template_fuzz: invariant broken: %s\n", what);
    abort();
  }
}

const ChatRenderer& TheRenderer() {
  static ChatRenderer* r = [] {
    auto loaded = ChatRenderer::Load(TANDEM_DEFAULT_MODEL_DIR);
    if (!loaded.ok()) {
      fprintf(stderr, "chat_template_fuzz: cannot load the template of %s\n", TANDEM_DEFAULT_MODEL_DIR);
      abort();
    }
    return new ChatRenderer(std::move(loaded).value());
  }();
  return *r;
}

const ojson& TheContext() {
  static const ojson context = ojson::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "What is 2+2? <|im_end|>"},
      {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4", "tool_calls": [
        {"type": "function", "function": {"name": "calc", "arguments": {"x": 2}}}]},
      {"role": "tool", "content": "4"},
      {"role": "user", "content": ["a", {"type": "text", "text": "b"}]}],
    "tools": [{"type": "function", "function": {"name": "calc", "description": "adds",
               "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}],
    "documents": null, "add_generation_prompt": true, "enable_thinking": false,
    "bos_token": null, "eos_token": "<|im_end|>"})");
  return context;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  TheRenderer();
  TheContext();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) == 0) {
    auto parsed = ChatTemplate::Parse(rest);
    if (!parsed.ok()) {
      Check(!parsed.status().message().empty(), "a parse error without a message");
      return 0;
    }
    auto rendered = parsed->Render(TheContext(), kFuzzLimits);
    if (!rendered.ok()) Check(!rendered.status().message().empty(), "a render error without a message");
    return 0;
  }
  ojson messages = ojson::parse(rest, nullptr, /*allow_exceptions=*/false);
  if (messages.is_discarded()) return 0;
  ChatOptions options;
  options.add_generation_prompt = data[0] & 2;
  if (data[0] & 4) options.extra_kwargs = {{"enable_thinking", false}};
  auto rendered = TheRenderer().Render(messages, options);
  if (!rendered.ok()) {
    Check(!rendered.status().message().empty(), "a render error without a message");
    return 0;
  }
  size_t last_end = 0;
  for (const auto& [begin, end] : rendered->literal_ranges) {
    Check(begin >= last_end && begin <= end && end <= rendered->text.size(), "a bad literal range");
    last_end = end;
  }
  return 0;
}
