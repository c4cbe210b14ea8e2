#include "planner/http_get.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace tandem::planner {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

Result<std::string> HttpGet(const std::string& host, int port, const std::string& target,
                            std::chrono::milliseconds timeout) {
  asio::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code ec;
  asio::ip::tcp::resolver resolver(io);
  auto addrs = resolver.resolve(host, std::to_string(port), ec);
  if (ec) return Err(StatusCode::kFailedPrecondition, "GET http://{}:{}{}: {}", host, port, target, ec.message());
  stream.expires_after(timeout);  // the whole exchange
  stream.connect(addrs, ec);
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, host);
  req.set(http::field::connection, "close");
  if (!ec) http::write(stream, req, ec);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  if (!ec) http::read(stream, buffer, parser, ec);
  beast::error_code ignored;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  if (ec) {
    return Err(StatusCode::kFailedPrecondition, "GET http://{}:{}{}: {}", host, port, target, ec.message());
  }
  auto res = parser.release();
  if (res.result_int() != 200) {
    return Err(StatusCode::kInternal, "GET http://{}:{}{}: HTTP {}", host, port, target, res.result_int());
  }
  return std::move(res.body());
}

}  // namespace tandem::planner
