#include "frontend/http_server.h"

#include <thread>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/logging.h"
#include "frontend/http_connection.h"

namespace tandem::http {

namespace asio = boost::asio;
using asio::ip::tcp;

// ---- detail::ServerState ----

namespace detail {

bool ServerState::Register(const std::shared_ptr<Connection>& connection) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return false;
  connections_[connection.get()] = connection;
  return true;
}

void ServerState::Unregister(const Connection* connection) {
  std::lock_guard<std::mutex> lock(mu_);
  connections_.erase(connection);
  if (connections_.empty()) idle_cv_.notify_all();
}

std::vector<std::shared_ptr<Connection>> ServerState::BeginStop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  std::vector<std::shared_ptr<Connection>> live;
  for (auto& [ptr, weak] : connections_) {
    if (auto connection = weak.lock()) live.push_back(std::move(connection));
  }
  return live;
}

bool ServerState::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_until(lock, deadline, [&] { return connections_.empty(); });
}

size_t ServerState::num_connections() {
  std::lock_guard<std::mutex> lock(mu_);
  return connections_.size();
}

}  // namespace detail

// ---- HttpServer ----

struct HttpServer::Impl {
  Options options;
  detail::ServerState state;
  // Declaration order = reverse destruction order: the io_context goes last.
  std::unique_ptr<asio::io_context> io;
  std::unique_ptr<asio::strand<asio::io_context::executor_type>> accept_strand;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
  std::atomic<int> port{0};
  bool started = false;
  bool stopped = false;

  asio::awaitable<void> AcceptLoop();
  void Teardown();
};

namespace {

asio::awaitable<void> RunConnection(std::shared_ptr<detail::Connection> connection) {
  co_await connection->Run();  // the parameter keeps the connection alive for the whole loop
}

}  // namespace

asio::awaitable<void> HttpServer::Impl::AcceptLoop() {
  constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
  for (;;) {
    asio::any_io_executor strand = asio::make_strand(*io);
    auto [ec, socket] = co_await acceptor->async_accept(strand, use_tuple);
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor->is_open() || state.stopping()) {
        co_return;
      }
      log::warn("http: accept failed: {}", ec.message());
      // Out of descriptors and the like: do not spin.
      asio::steady_timer pause(co_await asio::this_coro::executor, std::chrono::milliseconds(50));
      co_await pause.async_wait(use_tuple);
      continue;
    }
    boost::system::error_code opt_ec;
    socket.set_option(tcp::no_delay(true), opt_ec);  // each chunk leaves at once
    auto connection = std::make_shared<detail::Connection>(std::move(socket), state);
    if (!state.Register(connection)) continue;  // stopping: dropped, which closes it
    asio::co_spawn(strand, RunConnection(std::move(connection)), asio::detached);
  }
}

HttpServer::HttpServer() : HttpServer(Options()) {}

HttpServer::HttpServer(Options options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Route(std::string method, std::string path, Handler handler) {
  impl_->state.routes[std::move(path)][std::move(method)] = std::move(handler);
}

int HttpServer::port() const { return impl_->port.load(); }

Status HttpServer::Start() {
  Impl& m = *impl_;
  const Options& o = m.options;
  if (m.started) return Status(StatusCode::kFailedPrecondition, "HTTP server already started");
  if (o.num_threads < 1) return Err(StatusCode::kInvalidArgument, "num_threads must be >= 1");
  if (o.port < 0 || o.port > 65535) {
    return Err(StatusCode::kInvalidArgument, "port {} out of range", o.port);
  }
  m.state.config.max_body_bytes = o.max_body_bytes;
  m.state.config.read_timeout = o.read_timeout;
  m.state.config.write_timeout = o.write_timeout;

  m.io = std::make_unique<asio::io_context>(o.num_threads);
  boost::system::error_code ec;
  tcp::endpoint endpoint;
  asio::ip::address address = asio::ip::make_address(o.host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, static_cast<unsigned short>(o.port));
  } else {
    tcp::resolver resolver(*m.io);
    auto results = resolver.resolve(o.host, std::to_string(o.port), ec);
    if (ec || results.empty()) {
      m.io.reset();
      return Err(StatusCode::kInvalidArgument, "cannot resolve host {}: {}", o.host,
                 ec ? ec.message() : "no address");
    }
    endpoint = results.begin()->endpoint();
  }

  m.accept_strand = std::make_unique<asio::strand<asio::io_context::executor_type>>(
      asio::make_strand(*m.io));
  m.acceptor = std::make_unique<tcp::acceptor>(*m.accept_strand);
  auto fail = [&](const char* what) {
    Status status = Err(StatusCode::kFailedPrecondition, "cannot {} {}:{}: {}", what, o.host,
                        o.port, ec.message());
    m.acceptor.reset();
    m.accept_strand.reset();
    m.io.reset();
    return status;
  };
  if (m.acceptor->open(endpoint.protocol(), ec)) return fail("open a socket for");
  if (m.acceptor->set_option(asio::socket_base::reuse_address(true), ec)) return fail("set up");
  if (m.acceptor->bind(endpoint, ec)) return fail("bind");
  if (m.acceptor->listen(asio::socket_base::max_listen_connections, ec)) return fail("listen on");
  m.port = m.acceptor->local_endpoint(ec).port();

  m.started = true;
  asio::co_spawn(*m.accept_strand, m.AcceptLoop(), asio::detached);
  for (int i = 0; i < o.num_threads; ++i) {
    m.threads.emplace_back([io = m.io.get()] {
      for (;;) {
        try {
          io->run();
          return;
        } catch (const std::exception& e) {
          log::error("http: uncaught exception on a server thread: {}", e.what());
        }
      }
    });
  }
  log::info("HTTP server listening on {}:{}", endpoint.address().to_string(), m.port.load());
  return Status::Ok();
}

void HttpServer::Stop() {
  Impl& m = *impl_;
  if (!m.started || m.stopped) return;
  m.stopped = true;
  auto started = std::chrono::steady_clock::now();
  auto live = m.state.BeginStop();
  asio::post(*m.accept_strand, [&m] {
    boost::system::error_code ec;
    m.acceptor->close(ec);
  });
  for (auto& connection : live) connection->Close();
  live.clear();  // connections end (and unregister) when their loops finish
  if (!m.state.WaitIdle(started + m.options.stop_timeout)) {
    log::warn("http: {} connections still busy {} ms after Stop(); abandoning them",
              m.state.num_connections(), m.options.stop_timeout.count());
  }
  m.io->stop();
  for (auto& thread : m.threads) thread.join();
  m.threads.clear();
  m.acceptor.reset();
  m.accept_strand.reset();
  m.io.reset();  // destroys what was abandoned
  log::info("HTTP server on port {} stopped", m.port.load());
}

}  // namespace tandem::http
