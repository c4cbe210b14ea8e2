// HttpServer: the HTTP/1.1 server core (Boost.Beast + Asio, C++20 coroutines) behind http.h.
//
// Keep-alive; one whole request read at a time (headers + body within `read_timeout`; a body over
// `max_body_bytes` -> 413, a malformed request -> 400, headers over 64 KiB -> 431, a
// Content-Encoding other than identity -> 415, a Transfer-Encoding other than chunked or identity
// -> 501, these two closing the connection); routing by exact
// path (unknown -> 404, other method -> 405 with Allow; HEAD on a GET route runs the GET handler
// and sends its status and headers without the body); all error bodies OpenAI-style JSON
// (errors.h). Each connection runs on its own strand; the handler runs there as a coroutine while
// the server watches the socket, so ResponseWriter::OnDisconnect fires when the peer closes even
// if the handler is only waiting. A client that half-closes its sending side counts as gone (as
// with uvicorn); pipelined bytes are read ahead (up to 1 MiB) and kept for the next request.
// A handler that throws gets a 500 (if nothing was written yet) and a log line; a handler that
// returns without a response gets a 500 too; a stream left open is ended. Each request is logged
// at debug level: method, path, status, duration.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"
#include "frontend/http.h"

namespace tandem::http {

class HttpServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";  // numeric address or a name to resolve
    int port = 8000;                 // 0: an ephemeral port (see port())
    int num_threads = 2;             // threads running the io_context
    size_t max_body_bytes = 8u << 20;
    std::chrono::seconds read_timeout{60};   // one request (also the keep-alive idle time)
    std::chrono::seconds write_timeout{60};  // one write of a response, header or chunk
    // Stop(): how long connections get to finish after being closed before they are abandoned.
    std::chrono::milliseconds stop_timeout{2000};
  };

  HttpServer();
  explicit HttpServer(Options options);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Before Start(). `method` as sent ("GET", "POST"); `path` without query string. A later Route
  // for the same (method, path) replaces the earlier one.
  void Route(std::string method, std::string path, Handler handler);

  // Binds, listens and starts `num_threads` threads. Errors: kInvalidArgument (bad options or an
  // unresolvable host), kFailedPrecondition (already started; cannot bind, e.g. port in use).
  Status Start();
  // The bound port (the real one when Options::port was 0); 0 before Start().
  int port() const;
  // Graceful and idempotent: stops accepting, closes every connection (running handlers see
  // client_gone() and their OnDisconnect callbacks), waits up to stop_timeout for them, joins the
  // threads. Not from a handler (it joins the threads handlers run on).
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::http
