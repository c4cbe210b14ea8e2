#include "frontend/http_server.h"

#include <sys/resource.h>

#include <algorithm>
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

#include <fmt/format.h>

#include "common/log_limiter.h"
#include "common/thread_name.h"
#include "common/spare_descriptor.h"
#include "common/logging.h"
#include "frontend/http_connection.h"

namespace tandem::http {

namespace asio = boost::asio;
using asio::ip::tcp;

// ---- detail::ServerState ----

namespace detail {

namespace {
// 503 answers being written at once; beyond, a connection over the cap is closed unanswered.
constexpr size_t kMaxRejecting = 64;
}  // namespace

ServerState::Admission ServerState::Admit(const std::shared_ptr<Connection>& connection) {
  std::shared_ptr<Connection> victim;  // released after the lock: its destructor takes it
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Admission::kStopping;
    if (counted_ >= config.max_connections) {
      // The one waiting longest for a request (idle, or still sending its headers).
      Entry* oldest = nullptr;
      int64_t oldest_since = 0;
      for (auto& [ptr, entry] : connections_) {
        if (entry.kind != Kind::kCounted) continue;
        const Phase phase = ptr->phase();  // alive: ~Connection unregisters under this lock
        if (phase != Phase::kIdle && phase != Phase::kHeader) continue;
        const int64_t since = ptr->phase_since_ns();
        if (oldest == nullptr || since < oldest_since) {
          oldest = &entry;
          oldest_since = since;
        }
      }
      if (oldest != nullptr) victim = oldest->connection.lock();
      if (!victim) {
        if (rejecting_ >= kMaxRejecting) return Admission::kDropped;
        connections_[connection.get()] = {connection, Kind::kRejecting};
        ++rejecting_;
        return Admission::kRejected;
      }
      oldest->kind = Kind::kEvicted;
      --counted_;
    }
    connections_[connection.get()] = {connection, Kind::kCounted};
    ++counted_;
  }
  if (victim) victim->Evict();
  return Admission::kAdmitted;
}

void ServerState::Readmit(const Connection* connection) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(connection);
  if (it == connections_.end() || it->second.kind != Kind::kEvicted) return;
  it->second.kind = Kind::kCounted;
  ++counted_;
}

void ServerState::Unregister(const Connection* connection) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(connection);
  if (it == connections_.end()) return;
  if (it->second.kind == Kind::kCounted) --counted_;
  if (it->second.kind == Kind::kRejecting) --rejecting_;
  connections_.erase(it);
  if (connections_.empty()) idle_cv_.notify_all();
}

std::vector<std::shared_ptr<Connection>> ServerState::BeginStop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  std::vector<std::shared_ptr<Connection>> live;
  for (auto& [ptr, entry] : connections_) {
    if (auto connection = entry.connection.lock()) live.push_back(std::move(connection));
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
  SpareDescriptor spare;  // held from Start() to Stop(), for accepts out of descriptors
  LogLimiter accept_log{std::chrono::seconds(10)};

  asio::awaitable<void> AcceptLoop();
};

namespace {

constexpr std::chrono::milliseconds kMinAcceptPause{50};
constexpr std::chrono::milliseconds kMaxAcceptPause{1000};

asio::awaitable<void> RunConnection(std::shared_ptr<detail::Connection> connection) {
  co_await connection->Run();  // the parameter keeps the connection alive for the whole loop
}

asio::awaitable<void> RejectConnection(std::shared_ptr<detail::Connection> connection) {
  co_await connection->Reject();
}

bool OutOfDescriptors(const boost::system::error_code& ec) {
  return ec == asio::error::no_descriptors ||
         ec == boost::system::errc::too_many_files_open_in_system;
}

bool OutOfMemory(const boost::system::error_code& ec) {
  return ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
}

}  // namespace

asio::awaitable<void> HttpServer::Impl::AcceptLoop() {
  constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
  std::chrono::milliseconds pause = kMinAcceptPause;
  for (;;) {
    asio::any_io_executor strand = asio::make_strand(*io);
    auto [ec, socket] = co_await acceptor->async_accept(strand, use_tuple);
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor->is_open() || state.stopping()) {
        co_return;
      }
      // Out of descriptors and the like: refuse what waits, pause (longer while it lasts), and
      // say so once per 10 s, not at every failure.
      const bool descriptors = OutOfDescriptors(ec);
      const int refused = descriptors ? spare.RefuseWaiting(acceptor->native_handle()) : 0;
      uint64_t suppressed = 0;
      if (accept_log.ShouldLog(&suppressed)) {
        log::warn("http: accept failed: {} ({} connections open{}); {}pausing accepts up to {} "
                  "ms at a time ({} more failures since the last such line)",
                  ec.message(), state.num_connections(),
                  descriptors ? ", RLIMIT_NOFILE reached?" : "",
                  descriptors ? fmt::format("refused {} waiting, ", refused) : std::string(),
                  kMaxAcceptPause.count(), suppressed);
      }
      asio::steady_timer timer(co_await asio::this_coro::executor, pause);
      co_await timer.async_wait(use_tuple);
      if (descriptors || OutOfMemory(ec)) pause = std::min(pause * 2, kMaxAcceptPause);
      continue;
    }
    pause = kMinAcceptPause;
    spare.Refill();
    boost::system::error_code opt_ec;
    socket.set_option(tcp::no_delay(true), opt_ec);  // each chunk leaves at once
    auto connection = std::make_shared<detail::Connection>(std::move(socket), state);
    switch (state.Admit(connection)) {
      case detail::ServerState::Admission::kAdmitted:
        asio::co_spawn(strand, RunConnection(std::move(connection)), asio::detached);
        break;
      case detail::ServerState::Admission::kRejected:
        asio::co_spawn(strand, RejectConnection(std::move(connection)), asio::detached);
        break;
      default:  // stopping, or too many 503s in flight: dropped, which closes it
        break;
    }
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

size_t HttpServer::num_connections() const { return impl_->state.num_connections(); }

size_t HttpServer::max_connections() const {
  return impl_->started ? impl_->state.config.max_connections : 0;
}

Status HttpServer::Start() {
  Impl& m = *impl_;
  const Options& o = m.options;
  if (m.started) return Status(StatusCode::kFailedPrecondition, "HTTP server already started");
  if (o.num_threads < 1) return Err(StatusCode::kInvalidArgument, "num_threads must be >= 1");
  if (o.port < 0 || o.port > 65535) {
    return Err(StatusCode::kInvalidArgument, "port {} out of range", o.port);
  }
  using std::chrono::milliseconds;
  if (o.header_timeout <= milliseconds(0) || o.body_timeout <= milliseconds(0) ||
      o.keep_alive_timeout <= milliseconds(0) || o.write_timeout <= std::chrono::seconds(0)) {
    return Err(StatusCode::kInvalidArgument, "HTTP timeouts must be > 0");
  }
  if (o.max_connections < 1) return Err(StatusCode::kInvalidArgument, "max_connections must be >= 1");
  detail::ServerConfig& config = m.state.config;
  config.max_body_bytes = o.max_body_bytes;
  config.header_timeout = o.header_timeout;
  config.body_timeout = o.body_timeout;
  config.keep_alive_timeout = o.keep_alive_timeout;
  config.write_timeout = o.write_timeout;
  config.max_connections = o.max_connections;
  if (rlimit limit{}; getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const size_t room = limit.rlim_cur > 256 ? limit.rlim_cur - 128 : limit.rlim_cur / 2;
    if (config.max_connections > room) {
      log::warn("http: max_connections {} lowered to {}: the descriptor limit (RLIMIT_NOFILE, "
                "ulimit -n) is {}", config.max_connections, room, limit.rlim_cur);
      config.max_connections = std::max<size_t>(room, 1);
    }
  }

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

  m.spare.Refill();
  m.started = true;
  asio::co_spawn(*m.accept_strand, m.AcceptLoop(), asio::detached);
  for (int i = 0; i < o.num_threads; ++i) {
    m.threads.emplace_back([io = m.io.get()] {
      SetCurrentThreadName("tandem-http");
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
  m.spare.Release();
  log::info("HTTP server on port {} stopped", m.port.load());
}

}  // namespace tandem::http
