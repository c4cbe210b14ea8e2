// Test helpers for HTTP servers: a bounded Beast client and real curl (tests only).
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace tandem::http::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using Response = bhttp::response<bhttp::string_body>;

inline int64_t NowNs() { return Clock::now().time_since_epoch().count(); }

// Polls `done` every 5 ms until `timeout`.
template <typename F>
inline bool WaitFor(F done, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// A client whose every operation ends within its timeout.
class TestClient {
 public:
  explicit TestClient(int port) : stream_(io_) {
    stream_.expires_after(5s);
    stream_.async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port),
                          [this](beast::error_code ec) { ec_ = ec; });
    Run();
  }
  bool connected() const { return !ec_; }

  std::optional<Response> Send(const std::string& method, const std::string& target,
                               std::string body = "", unsigned version = 11) {
    bhttp::request<bhttp::string_body> req;
    req.method_string(method);
    req.target(target);
    req.version(version);
    req.set(bhttp::field::host, "127.0.0.1");
    req.set(bhttp::field::content_type, "application/json");
    req.body() = std::move(body);
    req.prepare_payload();
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(boost::none);
    stream_.expires_after(5s);
    beast::error_code ec;
    bhttp::async_write(stream_, req, [&](beast::error_code wec, size_t) {
      ec = wec;
      if (!wec) bhttp::async_read(stream_, buffer_, parser, [&](beast::error_code rec, size_t) {
        ec = rec;
      });
    });
    Run();
    if (ec) return std::nullopt;
    return parser.release();
  }

  bool WriteRaw(const std::string& bytes) {
    stream_.expires_after(5s);
    beast::error_code ec;
    asio::async_write(stream_, asio::buffer(bytes), [&](beast::error_code e, size_t) { ec = e; });
    Run();
    return !ec;
  }

  // Reads until `needle` has been seen (empty: until EOF), or EOF, error, timeout; returns
  // everything read so far on this connection (raw bytes).
  std::string ReadUntil(const std::string& needle, std::chrono::milliseconds timeout = 5000ms) {
    stream_.expires_after(timeout);
    while (needle.empty() || raw_.find(needle) == std::string::npos) {
      char data[4096];
      beast::error_code ec;
      size_t n = 0;
      stream_.async_read_some(asio::buffer(data), [&](beast::error_code e, size_t got) {
        ec = e;
        n = got;
      });
      Run();
      raw_.append(data, n);
      if (ec) {
        eof_ = (ec == asio::error::eof);
        break;
      }
    }
    return raw_;
  }
  std::string ReadToEof(std::chrono::milliseconds timeout = 5000ms) {
    return ReadUntil("", timeout);
  }
  bool saw_eof() const { return eof_; }
  void Close() {
    beast::error_code ec;
    stream_.socket().close(ec);
  }

 private:
  void Run() {
    io_.restart();
    io_.run();
  }
  asio::io_context io_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  beast::error_code ec_;
  std::string raw_;
  bool eof_ = false;
};

struct CurlResult {
  int code = -1;
  std::string body;
};

// Real curl; `args` already shell-quoted. Bounded by curl's own -m.
inline CurlResult Curl(const std::string& args) {
  std::string cmd = "/usr/bin/curl -s -m 10 -w '\\n%{http_code}' " + args + " 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return {};
  std::string out;
  char data[4096];
  size_t n;
  while ((n = fread(data, 1, sizeof(data), pipe)) > 0) out.append(data, n);
  pclose(pipe);
  CurlResult result;
  size_t nl = out.rfind('\n');
  if (nl == std::string::npos) return result;
  result.code = std::atoi(out.c_str() + nl + 1);
  result.body = out.substr(0, nl);
  return result;
}

}  // namespace tandem::http::testing
