// HTTP request bytes as a connection reads them (frontend/http_request_parse.h): Beast's parser
// with the server's limits, the request handlers see, the refused encodings. The bytes arrive all
// at once and, again, a few at a time (as from a slow client; the last input byte picks how many):
// both must give the same request. Then the invariants the server relies on: a request takes at
// most the bytes given, its header names are lower-case, a refused encoding comes with a message.
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "frontend/http_request_parse.h"

using tandem::http::detail::ParsedHttpRequest;
using tandem::http::detail::ParseRequestBytes;

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "http_request_fuzz: invariant broken: %s\n", what);
    abort();
  }
}

// Complete requests must agree. An error may show early with more bytes buffered (Beast checks
// the start line before the header's end when it has enough of it) where fewer are still
// incomplete at the end: an error and "incomplete" agree.
bool Same(const ParsedHttpRequest& a, const ParsedHttpRequest& b) {
  if (a.complete != b.complete) return false;
  if (!a.complete) return true;
  return a.consumed == b.consumed && a.version == b.version && a.keep_alive == b.keep_alive &&
         a.expect_continue == b.expect_continue && a.request.method == b.request.method &&
         a.request.target == b.request.target && a.request.query == b.request.query &&
         a.request.headers == b.request.headers && a.request.body == b.request.body &&
         a.unsupported == b.unsupported;
}

}  // namespace

// BOOST_ENABLE_ASSERT_HANDLER (tests/fuzz/CMakeLists.txt): every Boost assertion aborts except
// the one Beast fixed after Boost 1.81 (boostorg/beast#2861): parse_chunk_header asserts n >= 5
// when the last chunk "0\r\n" came alone and one more byte follows; the code after it is right.
namespace boost {
void assertion_failed(char const* expr, char const* function, char const* file, long line) {
  if (std::string_view(expr) == "n >= 5" && std::string_view(function).find("parse_chunk_header") != std::string_view::npos)
    return;
  fprintf(stderr, "%s:%ld: %s: Assertion '%s' failed.\n", file, line, function, expr);
  abort();
}
void assertion_failed_msg(char const* expr, char const* msg, char const* function, char const* file, long line) {
  fprintf(stderr, "%s:%ld: %s: Assertion '%s' failed: %s\n", file, line, function, expr, msg);
  abort();
}
}  // namespace boost

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const size_t slow_read = 1 + data[size - 1] % 16;
  // Two body limits: the server's default (8 MiB) and a small one, so that 413 is reachable.
  for (size_t limit : {size_t{8} << 20, size_t{64}}) {
    std::string_view rest = bytes;
    // Pipelined requests: parse until an error or the bytes end.
    for (int i = 0; i < 8 && !rest.empty(); ++i) {
      auto parsed = ParseRequestBytes(rest, limit);
      auto slow = ParseRequestBytes(rest, limit, slow_read);
      Check(Same(parsed, slow), "bytes read a few at a time parse differently");
      Check(parsed.consumed <= rest.size(), "consumed more bytes than given");
      if (parsed.error || !parsed.complete) break;
      Check(parsed.consumed > 0, "a complete request of no bytes");
      Check(parsed.request.body.size() <= limit, "a body beyond the limit");
      for (const auto& [name, value] : parsed.request.headers) {
        for (char c : name) Check(!std::isupper(static_cast<unsigned char>(c)), "a header name not lower-case");
      }
      Check(parsed.request.target.find('?') == std::string::npos, "a '?' left in the target");
      const auto& [status, message] = parsed.unsupported;
      Check(status == 0 || status == 415 || status == 501, "an unexpected status");
      Check((status == 0) == message.empty(), "a refusal without a message");
      rest.remove_prefix(parsed.consumed);
    }
  }
  return 0;
}
