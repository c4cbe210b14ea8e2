// One HTTP/1.1 connection: the keep-alive loop, the ResponseWriter of http.h, and peer watching.
#include "frontend/http_connection.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <stdexcept>
#include <utility>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>

#include <fmt/format.h>

#include "common/logging.h"
#include "frontend/errors.h"
#include "frontend/http_request_parse.h"

namespace tandem::http::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);
constexpr size_t kMaxReadAhead = 1 << 20;  // pipelined bytes buffered while a handler runs
constexpr std::chrono::milliseconds kLinger{1000};
constexpr const char* kJson = "application/json";

// "10 s", "1.5 s"
std::string Seconds(std::chrono::milliseconds d) {
  return fmt::format("{:g} s", static_cast<double>(d.count()) / 1000.0);
}

}  // namespace

// ---- ConnectionWriter: http.h's ResponseWriter over this connection ----

class ConnectionWriter final : public ResponseWriter {
 public:
  enum class State { kNone, kFull, kStreaming, kEnded };

  // `head`: a HEAD request served by a GET handler: the same status and headers (Content-Length
  // of the body it would have had), no body.
  ConnectionWriter(Connection& connection, unsigned version, bool keep_alive, bool head = false)
      : conn_(connection), version_(version), keep_alive_(keep_alive), head_(head) {}

  asio::awaitable<bool> WriteFull(int status, std::string content_type, std::string body,
                                  std::map<std::string, std::string> extra_headers) override {
    if (state_ != State::kNone) throw std::logic_error("HTTP response already started");
    state_ = State::kFull;
    status_ = status;
    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), version_};
    res.set(bhttp::field::content_type, content_type);
    for (auto& [name, value] : extra_headers) res.set(name, value);
    res.keep_alive(keep_alive_ && !conn_.state_.stopping());
    res.body() = std::move(body);
    res.prepare_payload();
    if (gone_) co_return false;
    conn_.stream_.expires_after(conn_.state_.config.write_timeout);
    if (head_) {
      bhttp::response_serializer<bhttp::string_body> serializer{res};
      auto [ec, n] = co_await bhttp::async_write_header(conn_.stream_, serializer, kUseTuple);
      co_return Written(ec);
    }
    auto [ec, n] = co_await bhttp::async_write(conn_.stream_, res, kUseTuple);
    co_return Written(ec);
  }

  asio::awaitable<bool> StartStream(int status, std::string content_type,
                                    std::map<std::string, std::string> extra_headers) override {
    if (state_ != State::kNone) throw std::logic_error("HTTP response already started");
    state_ = State::kStreaming;
    status_ = status;
    bhttp::response<bhttp::empty_body> res{static_cast<bhttp::status>(status), version_};
    res.set(bhttp::field::content_type, content_type);
    for (auto& [name, value] : extra_headers) res.set(name, value);
    chunked_ = version_ >= 11;
    if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the end of the stream is the close
    res.keep_alive(keep_alive_ && !conn_.state_.stopping());
    res.chunked(chunked_);
    if (gone_) co_return false;
    bhttp::response_serializer<bhttp::empty_body> serializer{res};
    conn_.stream_.expires_after(conn_.state_.config.write_timeout);
    auto [ec, n] = co_await bhttp::async_write_header(conn_.stream_, serializer, kUseTuple);
    co_return Written(ec);
  }

  asio::awaitable<bool> WriteChunk(std::string data) override {
    if (state_ != State::kStreaming) throw std::logic_error("WriteChunk outside a stream");
    if (gone_) co_return false;
    if (data.empty() || head_) co_return true;  // an empty chunk would end the stream
    conn_.stream_.expires_after(conn_.state_.config.write_timeout);
    if (chunked_) {
      auto [ec, n] = co_await asio::async_write(
          conn_.stream_, bhttp::make_chunk(asio::buffer(data)), kUseTuple);
      co_return Written(ec);
    }
    auto [ec, n] = co_await asio::async_write(conn_.stream_, asio::buffer(data), kUseTuple);
    co_return Written(ec);
  }

  asio::awaitable<void> EndStream() override {
    if (state_ != State::kStreaming) co_return;
    state_ = State::kEnded;
    if (gone_ || !chunked_ || head_) co_return;
    conn_.stream_.expires_after(conn_.state_.config.write_timeout);
    auto [ec, n] = co_await asio::async_write(conn_.stream_, bhttp::make_chunk_last(), kUseTuple);
    Written(ec);
  }

  bool client_gone() const override { return gone_.load(); }

  void OnDisconnect(std::function<void()> callback) override {
    if (gone_) {
      callback();
      return;
    }
    callbacks_.push_back(std::move(callback));
  }

  asio::any_io_executor executor() const override { return conn_.stream_.get_executor(); }

  // On the strand. Runs the callbacks once.
  void MarkGone() {
    if (gone_.exchange(true)) return;
    auto callbacks = std::move(callbacks_);
    callbacks_.clear();
    for (auto& callback : callbacks) {
      try {
        callback();
      } catch (const std::exception& e) {
        log::error("http: OnDisconnect callback threw: {}", e.what());
      }
    }
  }

  // Drops the callbacks: after the handler, nothing may call into its state.
  void Detach() { callbacks_.clear(); }

  State state() const { return state_; }
  int status() const { return status_; }
  // The connection can serve another request after this response.
  bool reusable() const {
    return keep_alive_ && !failed_ && !gone_ && (state_ == State::kFull || state_ == State::kEnded);
  }
  void ForbidReuse() { keep_alive_ = false; }

 private:
  bool Written(boost::system::error_code ec) {
    conn_.stream_.expires_never();
    if (!ec) return true;
    log::debug("http: write failed: {}", ec.message());
    failed_ = true;
    MarkGone();
    return false;
  }

  Connection& conn_;
  unsigned version_;
  bool keep_alive_;
  const bool head_;
  bool chunked_ = false;
  bool failed_ = false;
  State state_ = State::kNone;
  int status_ = 0;
  std::atomic<bool> gone_{false};
  std::vector<std::function<void()>> callbacks_;
};

// ---- Connection ----

Connection::Connection(tcp::socket socket, ServerState& state)
    : state_(state),
      stream_(std::move(socket)),
      done_timer_(stream_.get_executor()),
      deadline_(stream_.get_executor()) {
  phase_since_ns_ = std::chrono::steady_clock::now().time_since_epoch().count();
}

Connection::~Connection() { state_.Unregister(this); }

void Connection::Close() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] { self->CloseNow(); });
}

void Connection::Evict() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] {
    const Phase phase = self->phase();
    if (phase != Phase::kIdle && phase != Phase::kHeader) {
      self->state_.Readmit(self.get());  // it got its request meanwhile
      return;
    }
    log::debug("http: connection limit ({}) reached: closing a connection {} the longest",
               self->state_.config.max_connections,
               phase == Phase::kIdle ? "idle" : "waiting for its request headers");
    self->SetPhase(Phase::kClosing);
    self->CloseNow();
  });
}

void Connection::CloseNow() {
  closing_ = true;
  if (writer_ != nullptr) writer_->MarkGone();
  boost::system::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.close();
  done_timer_.cancel();
  DisarmDeadline();
}

void Connection::SetPhase(Phase phase) {
  phase_since_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                        std::memory_order_release);
  phase_.store(phase, std::memory_order_release);
}

void Connection::ArmDeadline(std::chrono::milliseconds timeout) {
  timed_out_ = false;
  const uint64_t generation = ++deadline_generation_;
  deadline_.expires_after(timeout);
  deadline_.async_wait([weak = weak_from_this(), generation](boost::system::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->deadline_generation_ != generation) return;
    self->timed_out_ = true;
    boost::system::error_code ignored;
    self->stream_.socket().cancel(ignored);  // the read ends with operation_aborted
  });
}

void Connection::DisarmDeadline() {
  ++deadline_generation_;
  deadline_.cancel();
}

asio::awaitable<bool> Connection::WaitForRequest() {
  if (buffer_.size() > 0) co_return true;  // pipelined, or read ahead while the handler ran
  SetPhase(Phase::kIdle);
  ArmDeadline(state_.config.keep_alive_timeout);
  auto [ec, n] = co_await stream_.async_read_some(buffer_.prepare(16 * 1024), kUseTuple);
  buffer_.commit(n);
  DisarmDeadline();
  if (buffer_.size() > 0) co_return true;
  if (timed_out_) {
    log::debug("http: idle connection closed after the keep-alive timeout ({} ms)",
               state_.config.keep_alive_timeout.count());
  } else if (ec != asio::error::eof) {
    log::debug("http: idle read ended: {}", ec.message());
  }
  co_return false;
}

asio::awaitable<void> Connection::Reject() {
  SetPhase(Phase::kClosing);
  try {
    ConnectionWriter writer(*this, 11, false);
    std::map<std::string, std::string> headers = {{"Retry-After", "1"}};
    co_await writer.WriteFull(
        503, kJson,
        OpenAIErrorBody("The server is at its limit of " +
                            std::to_string(state_.config.max_connections) +
                            " open connections; retry shortly.",
                        "server_error", "", "too_many_connections"),
        std::move(headers));
    co_await LingerClose();
  } catch (const std::exception& e) {
    log::debug("http: refusing a connection failed: {}", e.what());
  }
  boost::system::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.close();
}

asio::awaitable<void> Connection::Run() {
  try {
    while (!closing_ && !state_.stopping()) {
      if (!co_await ServeOne()) break;
    }
  } catch (const std::exception& e) {
    log::warn("http: connection error: {}", e.what());
  }
  SetPhase(Phase::kClosing);
  DisarmDeadline();
  boost::system::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.close();
}

asio::awaitable<bool> Connection::ServeOne() {
  bhttp::request_parser<bhttp::string_body> parser;
  parser.body_limit(state_.config.max_body_bytes);
  parser.header_limit(kHeaderLimit);
  // The first request's header deadline counts from the accept (the phase is kHeader since the
  // constructor); a later one's from its first byte.
  if (!first_request_) {
    if (!co_await WaitForRequest()) co_return false;
    SetPhase(Phase::kHeader);
  }
  first_request_ = false;
  ArmDeadline(state_.config.header_timeout);
  auto [ec, n] = co_await bhttp::async_read_header(stream_, buffer_, parser, kUseTuple);
  DisarmDeadline();
  if (ec) co_return co_await AnswerReadError(ec, parser.got_some() || buffer_.size() > 0);
  if (!parser.is_done()) {
    SetPhase(Phase::kBody);
    ArmDeadline(state_.config.body_timeout);
    if (beast::iequals(parser.get()[bhttp::field::expect], "100-continue")) {
      bhttp::response<bhttp::empty_body> go_on{bhttp::status::continue_, 11};
      stream_.expires_after(state_.config.write_timeout);
      auto [wec, wn] = co_await bhttp::async_write(stream_, go_on, kUseTuple);
      stream_.expires_never();
      if (wec) co_return timed_out_ ? co_await AnswerReadError(wec, true) : false;
    }
    auto [bec, bn] = co_await bhttp::async_read(stream_, buffer_, parser, kUseTuple);
    DisarmDeadline();
    if (bec) co_return co_await AnswerReadError(bec, true);
  }
  SetPhase(Phase::kBusy);

  auto message = parser.release();
  const unsigned version = message.version();
  const bool keep_alive = message.keep_alive();
  Request request = ToRequest(std::move(message));
  auto started = std::chrono::steady_clock::now();
  auto log_line = [&](int status) {
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                          started).count();
    log::debug("http: {} {} {} {:.1f} ms", ClientText(request.method), ClientText(request.target),
               status, ms);
  };

  // HEAD is answered by the GET handler (without the body) unless a HEAD handler is registered.
  auto path = state_.routes.find(request.target);
  const Handler* handler = nullptr;
  bool head = false;
  if (path != state_.routes.end()) {
    auto it = path->second.find(request.method);
    if (it == path->second.end() && request.method == "HEAD") {
      it = path->second.find("GET");
      head = it != path->second.end();
    }
    if (it != path->second.end()) handler = &it->second;
  }
  if (handler == nullptr) {
    ConnectionWriter writer(*this, version, keep_alive, request.method == "HEAD");
    int status = 404;
    std::map<std::string, std::string> extra;
    std::string body;
    if (path == state_.routes.end()) {
      body = OpenAIErrorBody("Invalid URL (" + ClientText(request.method) + " " +
                                 ClientText(request.target) + ")", "invalid_request_error");
    } else {
      status = 405;
      std::string allow;
      for (const auto& [method, unused] : path->second) {
        allow += (allow.empty() ? "" : ", ") + method;
      }
      if (path->second.count("GET") && !path->second.count("HEAD")) allow += ", HEAD";
      extra["Allow"] = allow;
      body = OpenAIErrorBody("Method " + ClientText(request.method) + " is not allowed for " +
                                 ClientText(request.target) +
                                 " (allowed: " + allow + ")",
                             "invalid_request_error");
    }
    co_await writer.WriteFull(status, kJson, std::move(body), std::move(extra));
    log_line(status);
    co_return writer.reusable();
  }
  if (auto [status, message] = UnsupportedEncoding(request); status != 0) {
    // The body was not understood: what follows it on the connection may not be a request.
    ConnectionWriter writer(*this, version, false, head);
    co_await writer.WriteFull(status, kJson, OpenAIErrorBody(message, "invalid_request_error"), {});
    log_line(status);
    co_await LingerClose();
    co_return false;
  }
  co_return co_await RunHandler(*handler, request, version, keep_alive, head);
}

asio::awaitable<bool> Connection::AnswerReadError(boost::system::error_code ec,
                                                   bool received_any) {
  const bool body = phase() == Phase::kBody;
  SetPhase(Phase::kClosing);
  int status = 0;
  std::string message;
  if (timed_out_) {
    timed_out_ = false;
    if (!received_any) {  // a connection that never sent a byte: nothing to answer
      log::debug("http: connection closed: no request within the header timeout");
      co_return false;
    }
    status = 408;
    message = body ? "The request body did not arrive within " + Seconds(state_.config.body_timeout)
                   : "The request headers did not arrive within " +
                         Seconds(state_.config.header_timeout);
    log::debug("http: {}", message);
  } else if (ec == bhttp::error::body_limit) {
    status = 413;
    message = "Request body too large (limit " + std::to_string(state_.config.max_body_bytes) +
              " bytes)";
  } else if (ec == bhttp::error::header_limit) {
    status = 431;
    message = "Request header fields too large";
  } else if (ec.category() == bhttp::make_error_code(bhttp::error::body_limit).category() &&
             ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
    status = 400;
    message = "Malformed HTTP request: " + ec.message();
  }
  if (status == 0) {  // EOF, reset, timeout, closed by Stop: nothing to answer
    if (ec != bhttp::error::end_of_stream) log::debug("http: read ended: {}", ec.message());
    co_return false;
  }
  log::debug("http: bad request -> {}: {}", status, ec.message());
  ConnectionWriter writer(*this, 11, false);
  co_await writer.WriteFull(status, kJson, OpenAIErrorBody(message, "invalid_request_error"), {});
  co_await LingerClose();
  co_return false;
}

asio::awaitable<void> Connection::LingerClose() {
  boost::system::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) co_return;
  stream_.expires_after(kLinger);
  char scratch[16 * 1024];
  for (;;) {
    auto [rec, n] = co_await stream_.async_read_some(asio::buffer(scratch), kUseTuple);
    if (rec) break;
  }
}

asio::awaitable<bool> Connection::RunHandler(const Handler& handler, const Request& request,
                                             unsigned version, bool keep_alive, bool head) {
  auto started = std::chrono::steady_clock::now();
  ConnectionWriter writer(*this, version, keep_alive, head);
  writer_ = &writer;
  handler_done_ = false;
  co_await (CallHandler(handler, request, writer) && WatchPeer());
  writer_ = nullptr;
  writer.Detach();
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  log::debug("http: {} {} {} {:.1f} ms{}", ClientText(request.method), ClientText(request.target),
             writer.status(), ms,
             writer.client_gone() ? " (client gone)" : "");
  co_return writer.reusable() && !peer_closed_ && !closing_;
}

asio::awaitable<void> Connection::CallHandler(const Handler& handler, const Request& request,
                                              ConnectionWriter& writer) {
  std::string error;
  try {
    co_await handler(request, writer);
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unknown exception";
  }
  if (!error.empty()) {
    log::error("http: handler for {} {} threw: {}", ClientText(request.method),
               ClientText(request.target), error);
  }
  try {
    switch (writer.state()) {
      case ConnectionWriter::State::kNone:
        if (writer.client_gone()) {  // nobody to answer: a handler may stop without writing
          writer.ForbidReuse();
          break;
        }
        if (error.empty()) {
          log::error("http: handler for {} {} wrote no response", ClientText(request.method),
                     ClientText(request.target));
        }
        writer.ForbidReuse();
        co_await writer.WriteFull(
            500, kJson,
            OpenAIErrorBody("The server had an error while processing your request.",
                            "server_error"),
            {});
        break;
      case ConnectionWriter::State::kStreaming:
        if (error.empty()) {
          co_await writer.EndStream();  // the handler forgot it
        } else {
          writer.ForbidReuse();  // no last chunk: the client sees a truncated stream
        }
        break;
      default:
        break;
    }
  } catch (const std::exception& e) {
    log::error("http: finishing a response failed: {}", e.what());
  }
  handler_done_ = true;
  boost::system::error_code ec;
  stream_.socket().cancel(ec);  // wakes WatchPeer's read
  done_timer_.cancel();         // or its wait
}

asio::awaitable<void> Connection::WatchPeer() {
  auto& socket = stream_.socket();
  while (!handler_done_) {
    if (peer_closed_ || buffer_.size() >= kMaxReadAhead || !socket.is_open()) {
      done_timer_.expires_at(std::chrono::steady_clock::time_point::max());
      co_await done_timer_.async_wait(kUseTuple);
      continue;
    }
    auto [ec, n] = co_await socket.async_read_some(buffer_.prepare(16 * 1024), kUseTuple);
    buffer_.commit(n);  // pipelined bytes of the next request
    // An EOF that comes with the end of the handler is not dropped: the socket would not report
    // it again to the next read (edge-triggered readiness), which would then wait for nothing.
    if (handler_done_ && (!ec || ec == asio::error::operation_aborted)) break;
    if (ec) {  // EOF, reset, or closed by a write timeout or Stop
      log::debug("http: peer gone while the handler runs: {}", ec.message());
      peer_closed_ = true;
      if (writer_ != nullptr && !handler_done_) writer_->MarkGone();  // not after the handler
    }
  }
}

}  // namespace tandem::http::detail
