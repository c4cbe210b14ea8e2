#include "frontend/http_request_parse.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/parser.hpp>

#include "frontend/errors.h"

namespace tandem::http::detail {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The comma-separated tokens of a header value, trimmed and lower-case.
std::vector<std::string> Tokens(std::string_view value) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= value.size()) {
    size_t comma = value.find(',', pos);
    if (comma == std::string_view::npos) comma = value.size();
    std::string_view t = value.substr(pos, comma - pos);
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    if (!t.empty()) out.push_back(Lower(t));
    pos = comma + 1;
  }
  return out;
}

}  // namespace

Request ToRequest(bhttp::request<bhttp::string_body>&& msg) {
  Request r;
  r.method = std::string(msg.method_string());
  std::string_view target = msg.target();
  size_t q = target.find('?');
  r.target = std::string(target.substr(0, q));
  if (q != std::string_view::npos) r.query = std::string(target.substr(q + 1));
  for (const auto& field : msg) {
    std::string key = Lower(field.name_string());
    auto [it, inserted] = r.headers.emplace(key, std::string(field.value()));
    if (!inserted) it->second += ", " + std::string(field.value());
  }
  r.body = std::move(msg.body());
  return r;
}

std::pair<int, std::string> UnsupportedEncoding(const Request& request) {
  for (const std::string& t : Tokens(request.Header("content-encoding"))) {
    if (t != "identity")
      return {415, "Content-Encoding '" + ClientText(t, 64) + "' is not supported; send the body "
                   "uncompressed."};
  }
  for (const std::string& t : Tokens(request.Header("transfer-encoding"))) {
    if (t != "chunked" && t != "identity")
      return {501, "Transfer-Encoding '" + ClientText(t, 64) + "' is not supported (only chunked)."};
  }
  return {0, ""};
}

ParsedHttpRequest ParseRequestBytes(std::string_view bytes, size_t max_body_bytes, size_t read_size) {
  ParsedHttpRequest out;
  bhttp::request_parser<bhttp::string_body> parser;
  parser.body_limit(max_body_bytes);
  parser.header_limit(kHeaderLimit);
  // As Beast's async_read_header and then async_read drive the parser over a connection's buffer:
  // put() whatever is buffered and not yet consumed; after need_more (or with nothing buffered)
  // read more first. The header is parsed alone (eager off), the body eagerly.
  read_size = std::max<size_t>(read_size, 1);
  size_t avail = 0;  // bytes "read" so far: bytes[out.consumed, avail) is buffered
  auto read_more = [&] {
    if (avail >= bytes.size()) return false;
    avail += std::min(read_size, bytes.size() - avail);
    return true;
  };
  read_more();
  while (!parser.is_done()) {
    if (out.consumed == avail && !read_more()) break;
    if (parser.is_header_done()) parser.eager(true);
    boost::system::error_code ec;
    const size_t n = parser.put(boost::asio::buffer(bytes.data() + out.consumed, avail - out.consumed), ec);
    out.consumed += n;
    if (!ec && n == 0 && !read_more()) break;  // no progress: more bytes, or the end
    if (ec == bhttp::error::need_more) {
      if (!read_more()) break;
      continue;
    }
    if (ec) {
      out.error = ec;
      return out;
    }
  }
  if (!parser.is_done()) {
    if (parser.is_header_done())
      out.expect_continue = beast::iequals(parser.get()[bhttp::field::expect], "100-continue");
    return out;
  }
  out.complete = true;
  out.expect_continue = beast::iequals(parser.get()[bhttp::field::expect], "100-continue");
  auto message = parser.release();
  out.version = message.version();
  out.keep_alive = message.keep_alive();
  out.request = ToRequest(std::move(message));
  out.unsupported = UnsupportedEncoding(out.request);
  return out;
}

}  // namespace tandem::http::detail
