// Internal to the HTTP server (http_server.cc, http_connection.cc): one connection's loop and the
// state the server shares with its connections. Not for handlers: they see http.h only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "frontend/http.h"

namespace tandem::http::detail {

class Connection;
class ConnectionWriter;

struct ServerConfig {
  size_t max_body_bytes = 8u << 20;
  std::chrono::seconds read_timeout{60};
  std::chrono::seconds write_timeout{60};
};

// Routes and the set of live connections; shared by the server and its connections.
class ServerState {
 public:
  ServerConfig config;
  std::map<std::string, std::map<std::string, Handler>> routes;  // path -> method -> handler

  bool stopping() const { return stopping_.load(); }
  // False once stopping: the caller drops the connection.
  bool Register(const std::shared_ptr<Connection>& connection);
  void Unregister(const Connection* connection);
  // Marks stopping and returns the live connections.
  std::vector<std::shared_ptr<Connection>> BeginStop();
  // True when no connection is left before `deadline`.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline);
  size_t num_connections();

 private:
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable idle_cv_;
  std::unordered_map<const Connection*, std::weak_ptr<Connection>> connections_;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // `socket` is bound to this connection's strand.
  Connection(boost::asio::ip::tcp::socket socket, ServerState& state);
  ~Connection();

  // The keep-alive loop; never throws. Runs on the strand.
  boost::asio::awaitable<void> Run();
  // From any thread: closes the socket on the strand; a running handler sees the client gone.
  void Close();

 private:
  friend class ConnectionWriter;

  // Reads, routes and answers one request; false when the connection should close.
  boost::asio::awaitable<bool> ServeOne();
  boost::asio::awaitable<bool> AnswerReadError(boost::system::error_code ec);
  // `head`: a HEAD request given to the GET handler (headers written, body dropped).
  boost::asio::awaitable<bool> RunHandler(const Handler& handler, const Request& request,
                                          unsigned version, bool keep_alive, bool head);
  boost::asio::awaitable<void> CallHandler(const Handler& handler, const Request& request,
                                           ConnectionWriter& writer);
  // While the handler runs: reads ahead (pipelined bytes go to buffer_) to see EOF or a reset.
  boost::asio::awaitable<void> WatchPeer();
  // After an error response with "Connection: close": half-close, then drain what the client
  // still sends (briefly) so that it reads our response instead of a reset.
  boost::asio::awaitable<void> LingerClose();
  void CloseNow();

  ServerState& state_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  boost::asio::steady_timer done_timer_;  // wakes WatchPeer when the handler is done
  ConnectionWriter* writer_ = nullptr;    // of the running handler, if any
  bool handler_done_ = true;
  bool peer_closed_ = false;
  bool closing_ = false;
};

}  // namespace tandem::http::detail
