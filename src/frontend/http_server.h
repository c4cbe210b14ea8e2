// HttpServer: the HTTP/1.1 server core (Boost.Beast + Asio, C++20 coroutines) behind http.h.
//
// Keep-alive; one whole request read at a time (a body over `max_body_bytes` -> 413, a malformed
// request -> 400, headers over 64 KiB -> 431, a Content-Encoding other than identity -> 415, a
// Transfer-Encoding other than chunked or identity -> 501, these two closing the connection);
// routing by exact path (unknown -> 404, other method -> 405 with Allow; HEAD on a GET route runs
// the GET handler and sends its status and headers without the body); all error bodies
// OpenAI-style JSON (errors.h). Each connection runs on its own strand; the handler runs there as a
// coroutine while the server watches the socket, so ResponseWriter::OnDisconnect fires when the
// peer closes even if the handler is only waiting. A client that half-closes its sending side
// counts as gone (as with uvicorn); pipelined bytes are read ahead (up to 1 MiB) and kept for the
// next request. A handler that throws gets a 500 (if nothing was written yet) and a log line; a
// handler that returns without a response gets a 500 too; a stream left open is ended. Each
// request is logged at debug level: method, path, status, duration.
//
// Slow and idle clients (Options below; nginx's client_header_timeout / client_body_timeout /
// keepalive_timeout, uvicorn's timeout_keep_alive):
//   - header_timeout: a request's line and headers must arrive within it, counted from the accept
//     (a connection's first request) or from the request's first byte (a later one). Missed: 408
//     with a JSON error body, then the connection is closed; a new connection that sent nothing at
//     all is closed without an answer.
//   - body_timeout: the whole body must arrive within it, counted from the end of the headers.
//     Missed: 408, then close.
//   - keep_alive_timeout: between two requests on a kept-alive connection, the wait for the next
//     request's first byte. Missed: closed without an answer.
//   - max_connections: connections open at once. A connection accepted beyond it first evicts the
//     connection that has waited longest for a request (idle between requests, or still reading a
//     request's headers: the slow clients), which is closed without an answer; so slow clients
//     cannot lock out a client that sends its request at once. When every connection is busy (a
//     body being read or a request being handled), the new one is answered 503 with
//     "Retry-After: 1" and an OpenAI-style JSON error body, then closed.
//   - accept() failing for want of descriptors (EMFILE, ENFILE) or memory: the server keeps one
//     spare descriptor, frees it to accept and close the waiting connection (a refusal the client
//     sees at once, not a hang), and pauses accepting (50 ms, doubling to 1 s while it lasts);
//     one warning line per 10 s at most, with the count of failures since the last one.
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
    // See the top of this file. Each must be > 0.
    std::chrono::milliseconds header_timeout{10000};     // request line + headers
    std::chrono::milliseconds body_timeout{30000};       // the whole body, after the headers
    std::chrono::milliseconds keep_alive_timeout{5000};  // idle between two requests
    std::chrono::seconds write_timeout{60};  // one write of a response, header or chunk
    // Connections open at once (>= 1). Start() lowers it, with a warning, to what the descriptor
    // table leaves room for (RLIMIT_NOFILE's soft limit less 128 for everything else).
    size_t max_connections = 1024;
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

  // Binds, listens and starts `num_threads` threads. Errors: kInvalidArgument (bad options: a
  // timeout <= 0, max_connections 0, num_threads < 1, a port out of range; or an unresolvable host), kFailedPrecondition (already started; cannot bind, e.g. port in use).
  Status Start();
  // The bound port (the real one when Options::port was 0); 0 before Start().
  int port() const;
  // Connections open now (admitted ones, and any being evicted or answered 503 and closed).
  size_t num_connections() const;
  // The cap in force after Start() (Options::max_connections, maybe lowered); 0 before.
  size_t max_connections() const;
  // Graceful and idempotent: stops accepting, closes every connection (running handlers see
  // client_gone() and their OnDisconnect callbacks), waits up to stop_timeout for them, joins the
  // threads. Not from a handler (it joins the threads handlers run on).
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::http
