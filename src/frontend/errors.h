// OpenAI-style error bodies, shared by the HTTP server core and the API handlers.
//
// Shape (as the OpenAI API returns it):
//   {"error":{"message":"...","type":"invalid_request_error","param":null,"code":null}}
#pragma once

#include <string>
#include <string_view>

namespace tandem::http {

// `param` and `code` empty -> JSON null. Strings are escaped as JSON (invalid UTF-8 replaced).
std::string OpenAIErrorBody(std::string_view message, std::string_view type,
                            std::string_view param = {}, std::string_view code = {});

}  // namespace tandem::http
