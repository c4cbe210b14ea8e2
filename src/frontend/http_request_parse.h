// Internal to the HTTP server (http_connection.cc): what it does with a request's bytes, apart
// from the socket. The Beast parser's limits, the request as handlers see it (http.h), and the
// body encodings it refuses; ParseRequestBytes runs them all over bytes in memory (the fuzz
// target tests/fuzz/http_request_fuzz.cc, and tests).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/system/error_code.hpp>

#include "frontend/http.h"

namespace tandem::http::detail {

inline constexpr size_t kHeaderLimit = 64 * 1024;

// The request handlers see: method, target without the query, the query, headers lower-case
// (repeated ones joined with ", "), the body.
Request ToRequest(boost::beast::http::request<boost::beast::http::string_body>&& msg);

// A body the server cannot read as sent: a Content-Encoding other than identity (415) or a
// Transfer-Encoding other than chunked / identity (501). Status 0: fine.
std::pair<int, std::string> UnsupportedEncoding(const Request& request);

// One request parsed from `bytes` with the server's parser settings (header limit kHeaderLimit,
// body limit `max_body_bytes`), as a connection reads it when the bytes arrive `read_size` at a
// time: `error` is the parser's error (then nothing else is set), or `complete` is false when the
// bytes end before the request does.
struct ParsedHttpRequest {
  boost::system::error_code error;
  bool complete = false;
  size_t consumed = 0;  // bytes of `bytes` the request took (the rest: the next, pipelined)
  unsigned version = 0;
  bool keep_alive = false;
  bool expect_continue = false;  // "Expect: 100-continue"
  Request request;
  std::pair<int, std::string> unsupported{0, ""};  // UnsupportedEncoding(request)
};
ParsedHttpRequest ParseRequestBytes(std::string_view bytes, size_t max_body_bytes,
                                    size_t read_size = static_cast<size_t>(-1));

}  // namespace tandem::http::detail
