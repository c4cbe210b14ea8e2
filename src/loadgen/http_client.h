// HttpConnection: one keep-alive HTTP/1.1 client connection (Boost.Beast, C++20 coroutines) that
// streams the response body to a callback with the time each piece arrived. Plain http:// only.
// It connects lazily, reconnects after the server closed it, and retries a request once on a
// fresh connection when a reused one turns out to be dead before any response byte came.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "common/status.h"
#include "loadgen/record.h"

namespace tandem::bench {

using Clock = std::chrono::steady_clock;

struct Endpoint {
  std::string host;         // as given ("127.0.0.1", "localhost", "[::1]" without brackets)
  std::string port = "80";
  std::string base_path;    // "" or "/prefix" (no trailing slash)
};

// "http://host[:port][/path]". InvalidArgument for anything else (https is not supported).
Result<Endpoint> ParseUrl(const std::string& url);

struct HttpResult {
  ErrorKind error = ErrorKind::kNone;  // kNone, kHttpStatus, kConnection or kTimeout
  int status = 0;
  std::string message;                  // the error, or the body of a non-200 answer (cut)
};

class HttpConnection {
 public:
  // Called for each piece of a 200 body, with its arrival time; return false to abort.
  using OnData = std::function<bool(std::string_view, Clock::time_point)>;

  HttpConnection(boost::asio::any_io_executor executor, Endpoint endpoint);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // `method` "GET" or "POST"; `target` appended to the base path; `headers` extra (name, value).
  boost::asio::awaitable<HttpResult> Request(
      std::string method, std::string target, std::string body,
      std::vector<std::pair<std::string, std::string>> headers, Clock::time_point deadline,
      OnData on_data);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::bench
