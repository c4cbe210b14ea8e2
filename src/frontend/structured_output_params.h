// The structured-output parameters of an OpenAI request body, into SamplingParams::structured:
//   response_format  {"type": "text"} (none), {"type": "json_object"}, or {"type": "json_schema",
//                    "json_schema": {"name": ..., "schema": {...}, "strict": ...}} (OpenAI);
//   guided_json (a schema object or its JSON text), guided_regex, guided_choice (a list of
//   strings), guided_grammar (GBNF), and structured_outputs {"json" | "regex" | "choice" |
//   "grammar" | "json_object": true} (vLLM's extras; guided_decoding_backend is accepted and
//   ignored: tandem has one grammar engine).
// At most one may ask for a constraint. The spec is compiled here (a process-wide cache) so that a
// bad one is a 400 naming the parameter and the problem before any worker sees it; a compiled
// spec is never dropped for unconstrained sampling.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "engine/sampling_params.h"
#include "frontend/openai_request.h"

namespace tandem::openai {

std::optional<ApiError> ParseStructuredOutput(const nlohmann::ordered_json& body,
                                              SamplingParams* params);

}  // namespace tandem::openai
