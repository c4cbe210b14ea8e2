// Structured-output specs from any client (grammar/structured_output.h): the first byte picks the
// kind (JSON Schema, regex, GBNF, choice), the rest is the spec. A spec compiles or is
// InvalidArgument, never anything else; a compiled one walks: a Matcher takes bytes of the input
// until one is refused, and what MinBytesToComplete says is finite for a state it reached (the
// compiler refuses grammars that can never end).
// The walk stops once the states it passed through held kWalkBudget stacks in all: a matcher step
// costs as much as its state has stacks, and a 3 KB regex of `.` runs and `.*` branches keeps
// ~1,000 of them for every byte of a 3 KB walk (3 M, 1-6 s under ASan on the loaded machine: the
// timeouts regress-dot-star-branches and its longer variant). Ordinary walks never reach it.
// 2^16 stacks (it was 2^19 until 2026-12-07): the work corpus's 1,127 inputs replay in 26 s instead
// of 75 s (UBSan build), since the fuzzer kept finding such walks and spent most of its time past
// the point where each further byte repeats the same matcher step.
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

constexpr size_t kWalkBudget = size_t{1} << 16;

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
  size_t walked = 0;
  for (size_t i = 1; i < size && walked < kWalkBudget; ++i) {
    walked += m.state().tops.size();
    const std::string byte(1, static_cast<char>(data[i]));
    if (!m.Accept(byte)) break;
    Check(m.MinBytesToComplete(m.state()) < Automaton::kNever, "a reached state cannot complete");
  }
  return 0;
}
