#include "loadgen/http_client.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace tandem::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using asio::ip::tcp;

Result<Endpoint> ParseUrl(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0)
    return Err(StatusCode::kInvalidArgument, "url '{}': only http://host[:port][/path] is supported",
               url);
  std::string rest = url.substr(kScheme.size());
  Endpoint ep;
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) ep.base_path = rest.substr(slash);
  while (!ep.base_path.empty() && ep.base_path.back() == '/') ep.base_path.pop_back();
  if (!authority.empty() && authority.front() == '[') {  // [v6]:port
    size_t close = authority.find(']');
    if (close == std::string::npos) return Err(StatusCode::kInvalidArgument, "url '{}': bad host", url);
    ep.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return Err(StatusCode::kInvalidArgument, "url '{}': bad port", url);
      ep.port = authority.substr(close + 2);
    }
  } else {
    size_t colon = authority.rfind(':');
    ep.host = authority.substr(0, colon);
    if (colon != std::string::npos) ep.port = authority.substr(colon + 1);
  }
  if (ep.host.empty()) return Err(StatusCode::kInvalidArgument, "url '{}': no host", url);
  if (ep.port.empty() || ep.port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(ep.port) > 65535)
    return Err(StatusCode::kInvalidArgument, "url '{}': bad port", url);
  return ep;
}

struct HttpConnection::Impl {
  Impl(asio::any_io_executor ex, Endpoint e) : stream(ex), resolver(ex), endpoint(std::move(e)) {}
  beast::tcp_stream stream;
  tcp::resolver resolver;
  Endpoint endpoint;
  beast::flat_buffer buffer;
  bool connected = false;

  void Close() {
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.socket().close(ignored);
    buffer.clear();
    connected = false;
  }
};

HttpConnection::HttpConnection(asio::any_io_executor executor, Endpoint endpoint)
    : impl_(std::make_unique<Impl>(std::move(executor), std::move(endpoint))) {}
HttpConnection::~HttpConnection() { impl_->Close(); }

namespace {

HttpResult Fail(const beast::error_code& ec, const char* what) {
  HttpResult r;
  r.error = ec == beast::error::timeout ? ErrorKind::kTimeout : ErrorKind::kConnection;
  r.message = std::string(what) + ": " + ec.message();
  return r;
}

}  // namespace

asio::awaitable<HttpResult> HttpConnection::Request(
    std::string method, std::string target, std::string body,
    std::vector<std::pair<std::string, std::string>> headers, Clock::time_point deadline,
    OnData on_data) {
  Impl& c = *impl_;
  auto tuple = asio::as_tuple(asio::use_awaitable);
  bhttp::request<bhttp::string_body> req{method == "GET" ? bhttp::verb::get : bhttp::verb::post,
                                         c.endpoint.base_path + target, 11};
  req.set(bhttp::field::host, c.endpoint.host + ":" + c.endpoint.port);
  req.set(bhttp::field::user_agent, "tandem-bench");
  req.keep_alive(true);
  for (auto& [name, value] : headers) req.set(name, value);
  if (method != "GET") {
    req.set(bhttp::field::content_type, "application/json");
    req.body() = std::move(body);
    req.prepare_payload();
  }

  for (int attempt = 0;; ++attempt) {
    const bool reused = c.connected;
    c.stream.expires_at(deadline);
    if (!c.connected) {
      auto [rec, results] = co_await c.resolver.async_resolve(c.endpoint.host, c.endpoint.port, tuple);
      if (rec) co_return Fail(rec, "resolve");
      auto [cec, ep] = co_await c.stream.async_connect(results, tuple);
      if (cec) {
        c.Close();
        co_return Fail(cec, "connect");
      }
      c.stream.socket().set_option(tcp::no_delay(true));
      c.connected = true;
    }
    auto [wec, wn] = co_await bhttp::async_write(c.stream, req, tuple);
    bhttp::response_parser<bhttp::buffer_body> parser;
    parser.body_limit(boost::none);
    beast::error_code ec = wec;
    if (!ec) std::tie(ec, std::ignore) = co_await bhttp::async_read_header(c.stream, c.buffer, parser, tuple);
    if (ec) {
      c.Close();
      // A kept-alive connection the server had closed: try once more on a new one.
      if (reused && attempt == 0 && ec != beast::error::timeout) continue;
      co_return Fail(ec, wec ? "write" : "read header");
    }
    HttpResult result;
    result.status = parser.get().result_int();
    std::string error_body;
    char buf[16384];
    bool aborted = false;
    while (!parser.is_done()) {
      parser.get().body().data = buf;
      parser.get().body().size = sizeof buf;
      auto [rec, rn] = co_await bhttp::async_read_some(c.stream, c.buffer, parser, tuple);
      if (rec == bhttp::error::need_buffer) rec = {};
      if (rec) {
        c.Close();
        co_return Fail(rec, "read body");
      }
      const size_t got = sizeof buf - parser.get().body().size;
      if (got == 0) continue;
      const auto now = Clock::now();
      if (result.status != 200) {
        if (error_body.size() < 2048) error_body.append(buf, std::min<size_t>(got, 2048));
      } else if (!on_data(std::string_view(buf, got), now)) {
        aborted = true;
        break;
      }
    }
    if (aborted || !parser.keep_alive()) c.Close();
    if (result.status != 200) {
      result.error = ErrorKind::kHttpStatus;
      result.message = error_body;
    }
    co_return result;
  }
}

}  // namespace tandem::bench
