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
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{30000};
  std::chrono::milliseconds keep_alive_timeout{5000};
  std::chrono::seconds write_timeout{60};
  size_t max_connections = 1024;
};

// What a connection is doing, for the choice of whom to evict when the cap is reached.
enum class Phase : int {
  kIdle,     // kept alive, waiting for the next request's first byte (evictable)
  kHeader,   // reading a request's line and headers (evictable)
  kBody,     // reading a body
  kBusy,     // a handler runs or a response is written
  kClosing,  // evicted, rejected or ending
};

// Routes and the set of live connections; shared by the server and its connections.
class ServerState {
 public:
  ServerConfig config;
  std::map<std::string, std::map<std::string, Handler>> routes;  // path -> method -> handler

  enum class Admission {
    kAdmitted,  // counted against max_connections (maybe after evicting another: see Admit)
    kRejected,  // over the cap, nobody evictable: answer 503 and close (not counted)
    kDropped,   // over the cap and too many 503s being written: close at once
    kStopping,  // the server stops: close at once
  };

  bool stopping() const { return stopping_.load(); }
  // Counts `connection` in. At the cap, the connection that has been in kIdle or kHeader the
  // longest is evicted (its Evict() is posted; it no longer counts) and `connection` is admitted.
  Admission Admit(const std::shared_ptr<Connection>& connection);
  void Unregister(const Connection* connection);
  // An evicted connection that had left kIdle / kHeader before Evict() ran: counted again.
  void Readmit(const Connection* connection);
  // Marks stopping and returns the live connections.
  std::vector<std::shared_ptr<Connection>> BeginStop();
  // True when no connection is left before `deadline`.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline);
  size_t num_connections();  // all open ones, counted or not

 private:
  enum class Kind { kCounted, kEvicted, kRejecting };
  struct Entry {
    std::weak_ptr<Connection> connection;
    Kind kind;
  };

  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable idle_cv_;
  std::unordered_map<const Connection*, Entry> connections_;
  size_t counted_ = 0;    // entries of kind kCounted
  size_t rejecting_ = 0;  // entries of kind kRejecting
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // `socket` is bound to this connection's strand.
  Connection(boost::asio::ip::tcp::socket socket, ServerState& state);
  ~Connection();

  // The keep-alive loop; never throws. Runs on the strand.
  boost::asio::awaitable<void> Run();
  // Instead of Run() for a connection over the cap: 503 with Retry-After, then close.
  boost::asio::awaitable<void> Reject();
  // From any thread: closes the socket on the strand; a running handler sees the client gone.
  void Close();
  // From any thread (ServerState::Admit): on the strand, closes the connection if it is still
  // idle or reading headers, else counts it in again (ServerState::Readmit).
  void Evict();

  // Read from any thread (ServerState::Admit, under its lock).
  Phase phase() const { return phase_.load(std::memory_order_acquire); }
  int64_t phase_since_ns() const { return phase_since_ns_.load(std::memory_order_acquire); }

 private:
  friend class ConnectionWriter;

  // Reads, routes and answers one request; false when the connection should close.
  boost::asio::awaitable<bool> ServeOne();
  // `received_any`: some of the request had arrived (a timeout then gets a 408).
  boost::asio::awaitable<bool> AnswerReadError(boost::system::error_code ec, bool received_any);
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
  void SetPhase(Phase phase);
  // A deadline for the reads that follow: when it passes, the socket's operations are cancelled
  // and timed_out_ is set (the socket stays open, so that a 408 can still be written).
  void ArmDeadline(std::chrono::milliseconds timeout);
  void DisarmDeadline();
  // Reads until buffer_ holds at least one byte, within the keep-alive timeout; false: close.
  boost::asio::awaitable<bool> WaitForRequest();

  ServerState& state_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  boost::asio::steady_timer done_timer_;  // wakes WatchPeer when the handler is done
  boost::asio::steady_timer deadline_;    // ArmDeadline
  uint64_t deadline_generation_ = 0;      // a fired wait of an older arming is ignored
  bool timed_out_ = false;
  bool first_request_ = true;
  std::atomic<Phase> phase_{Phase::kHeader};
  std::atomic<int64_t> phase_since_ns_{0};
  ConnectionWriter* writer_ = nullptr;    // of the running handler, if any
  bool handler_done_ = true;
  bool peer_closed_ = false;
  bool closing_ = false;
};

}  // namespace tandem::http::detail
