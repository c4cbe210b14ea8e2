// Structured-output specs from any client (grammar/structured_output.h): the first byte picks the
// kind (JSON Schema, regex, GBNF, choice), the rest is the spec. A spec compiles or is
// InvalidArgument, never anything else; a compiled one walks: a Matcher takes bytes of the input
// until one is refused, and what MinBytesToComplete says is finite for a state it reached (the
// compiler refuses grammars that can never end).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "grammar/matcher.h"
#include "grammar/structured_output.h"

using namespace tandem;
using namespace tandem::grammar;

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "grammar_fuzz: invariant broken: %s\n", what);
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 4096) return 0;
  static const StructuredKind kKinds[] = {StructuredKind::kJsonSchema, StructuredKind::kRegex,
                                          StructuredKind::kGrammar, StructuredKind::kChoice};
  StructuredOutputSpec spec;
  spec.kind = kKinds[data[0] % 4];
  spec.any_whitespace = (data[0] & 4) != 0;
  spec.spec.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  auto compiled = CompileStructuredOutput(spec);
  if (!compiled.ok()) {
    Check(compiled.status().code() == StatusCode::kInvalidArgument, "a bad spec that is not InvalidArgument");
    return 0;
  }
  Matcher m(*compiled);
  Check(m.MinBytesToComplete(m.state()) < Automaton::kNever, "the start cannot complete");
  for (size_t i = 1; i < size; ++i) {
    const std::string byte(1, static_cast<char>(data[i]));
    if (!m.Accept(byte)) break;
    Check(m.MinBytesToComplete(m.state()) < Automaton::kNever, "a reached state cannot complete");
  }
  return 0;
}
