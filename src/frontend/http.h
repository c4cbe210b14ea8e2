// The HTTP layer's contract with request handlers (Boost.Beast/Asio, C++20 coroutines).
//
// The server reads a whole request (body limit -> 413), routes by exact path (unknown path -> 404,
// known path with another method -> 405, both with OpenAI-style JSON error bodies; HEAD on a GET
// route -> the GET handler, its body not sent), and calls the
// handler as a coroutine on the connection's executor. A handler writes either one full response
// or a stream (Server-Sent Events for OpenAI streaming).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/any_io_executor.hpp>

namespace tandem::http {

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path without the query string, e.g. "/v1/chat/completions"
  std::string query;   // after '?', may be empty
  std::map<std::string, std::string> headers;  // keys lower-case
  std::string body;
  std::string Header(std::string_view name_lower) const {
    auto it = headers.find(std::string(name_lower));
    return it == headers.end() ? std::string() : it->second;
  }
};

// One response per request: WriteFull once, or StartStream + WriteChunk* + EndStream.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // Headers: Content-Type plus `extra_headers`. Returns false when the client is gone.
  virtual boost::asio::awaitable<bool> WriteFull(
      int status, std::string content_type, std::string body,
      std::map<std::string, std::string> extra_headers = {}) = 0;
  // Chunked transfer encoding; content type e.g. "text/event-stream".
  virtual boost::asio::awaitable<bool> StartStream(
      int status, std::string content_type, std::map<std::string, std::string> extra_headers = {}) = 0;
  // Writes and flushes `data` as one chunk. false when the client is gone.
  virtual boost::asio::awaitable<bool> WriteChunk(std::string data) = 0;
  virtual boost::asio::awaitable<void> EndStream() = 0;

  // True once the peer closed its side (detected while the handler runs, even when the handler
  // is not writing). OnDisconnect registers a callback run once, on the connection's executor,
  // when that happens (at once if it already happened).
  virtual bool client_gone() const = 0;
  virtual void OnDisconnect(std::function<void()> callback) = 0;
  // The executor the handler runs on (for timers and channels).
  virtual boost::asio::any_io_executor executor() const = 0;
};

using Handler = std::function<boost::asio::awaitable<void>(const Request&, ResponseWriter&)>;

}  // namespace tandem::http
