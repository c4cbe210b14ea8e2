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

// Client-provided text made safe to echo into a log line or an error message: at most `max_bytes`
// of it (cut on a UTF-8 boundary, then "..."), with control characters (C0, DEL, C1) escaped as
// \n, \r, \t, \xHH or \u00HH and bytes that are not UTF-8 as \xHH, so that it can neither forge a
// log line nor a terminal escape nor blow up the log.
std::string ClientText(std::string_view text, size_t max_bytes = 256);

}  // namespace tandem::http
