#include "rpc/connection_gate.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log_limiter.h"
#include "common/logging.h"
#include "common/spare_descriptor.h"

namespace tandem::runtime {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";  // RFC 9113 section 3.4
constexpr size_t kMagicLen = sizeof(kPreface) - 1;              // 24
// The magic, then the SETTINGS frame's 9-byte header (length 3, type 0x4, flags 1, stream id 4
// = 0) that must follow it (RFC 9113 sections 3.4, 4.1, 6.5).
constexpr size_t kPrefaceLen = kMagicLen + 9;

// Whether the bytes peeked so far can begin a client preface.
bool CanBePreface(const unsigned char* got, size_t n) {
  if (std::memcmp(got, kPreface, std::min(n, kMagicLen)) != 0) return false;
  if (n > kMagicLen + 3 && got[kMagicLen + 3] != 0x4) return false;  // not SETTINGS
  if (n >= kPrefaceLen && ((got[kMagicLen + 5] & 0x7f) | got[kMagicLen + 6] | got[kMagicLen + 7] |
                           got[kMagicLen + 8]) != 0) {
    return false;  // SETTINGS on a stream
  }
  return true;
}
constexpr milliseconds kMinAcceptPause{50};
constexpr milliseconds kMaxAcceptPause{1000};
constexpr milliseconds kPruneEvery{1000};

// A listening socket on host:port (SO_REUSEADDR, close-on-exec, non-blocking); -1 and errno-style
// reason in *why on failure.
int Listen(std::string host, int port, std::string* why) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    *why = gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) break;
    *why = std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return 0;
}

bool OutOfDescriptors(int err) { return err == EMFILE || err == ENFILE; }

}  // namespace

struct ConnectionGate::Impl {
  struct Waiting {
    int fd;
    Clock::time_point deadline;
    Clock::time_point recheck{};  // part of the preface came: polled again from then on
  };
  struct Handed {
    int fd;
    ino_t inode;
  };

  Options options;
  Handoff handoff;
  int listen_fd = -1;
  int wake_fd = -1;
  std::atomic<int> port{0};
  std::atomic<int> open{0};
  std::atomic<bool> stopping{false};
  std::thread thread;
  std::mutex mu;  // Start/Stop
  bool started = false;
  // The thread's own:
  std::vector<Waiting> waiting;
  std::vector<Handed> handed;
  SpareDescriptor spare;
  LogLimiter full_log{std::chrono::seconds(10)};
  LogLimiter accept_log{std::chrono::seconds(10)};
  Clock::time_point accept_paused_until{};
  milliseconds pause = kMinAcceptPause;
  Clock::time_point last_prune{};

  void Count() { open.store(static_cast<int>(waiting.size() + handed.size())); }

  // Drops the handed-over connections whose descriptor gRPC has closed (or reused: the inode
  // differs then).
  void Prune() {
    last_prune = Clock::now();
    std::erase_if(handed, [](const Handed& h) {
      struct stat st {};
      return ::fstat(h.fd, &st) != 0 || st.st_ino != h.inode;
    });
    Count();
  }

  void AcceptAll() {
    for (;;) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) return;
        const int err = errno;
        const int refused = OutOfDescriptors(err) ? spare.RefuseWaiting(listen_fd) : 0;
        uint64_t suppressed = 0;
        if (accept_log.ShouldLog(&suppressed)) {
          log::warn("{}: accept failed: {} ({} connections open); refused {} waiting, pausing "
                    "accepts up to {} ms at a time ({} more failures since the last such line)",
                    options.name, std::strerror(err), open.load(), refused,
                    kMaxAcceptPause.count(), suppressed);
        }
        accept_paused_until = Clock::now() + pause;
        pause = std::min(pause * 2, kMaxAcceptPause);
        return;
      }
      pause = kMinAcceptPause;
      spare.Refill();
      auto full = [&] { return static_cast<int>(waiting.size() + handed.size()) >= options.max_connections; };
      if (full()) Prune();  // only at the cap: one fstat per handed connection
      if (full()) {
        ::close(fd);
        uint64_t suppressed = 0;
        if (full_log.ShouldLog(&suppressed)) {
          log::warn("{}: at its limit of {} connections, refusing new ones ({} more refused since "
                    "the last such line)", options.name, options.max_connections, suppressed);
        }
        continue;
      }
      waiting.push_back({fd, Clock::now() + milliseconds(options.handshake_timeout_ms)});
      Count();
    }
  }

  // A waiting connection is readable: hands it over once the preface is there; true when it
  // left the waiting list (handed over or closed).
  bool CheckPreface(Waiting& w, short revents) {
    const int fd = w.fd;
    unsigned char got[kPrefaceLen];
    const ssize_t n = ::recv(fd, got, sizeof(got), MSG_PEEK);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    if (n <= 0 || !CanBePreface(got, static_cast<size_t>(n))) {
      ::close(fd);  // closed, reset, or not HTTP/2
      return true;
    }
    if (static_cast<size_t>(n) < kPrefaceLen) {
      if (revents & (POLLRDHUP | POLLHUP | POLLERR)) {  // and no more will come
        ::close(fd);
        return true;
      }
      // The rest is on its way: look again in 10 ms (the peeked bytes stay readable, so until then
      // it is polled only for its close).
      w.recheck = Clock::now() + milliseconds(10);
      return false;
    }
    struct stat st {};
    ::fstat(fd, &st);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    handed.push_back({fd, st.st_ino});
    handoff(fd);
    return true;
  }

  void Run() {
    std::vector<pollfd> fds;
    while (!stopping.load()) {
      const Clock::time_point now = Clock::now();
      fds.clear();
      fds.push_back({wake_fd, POLLIN, 0});
      const bool accepting = now >= accept_paused_until;
      fds.push_back({accepting ? listen_fd : -1, POLLIN, 0});
      Clock::time_point wake = now + kPruneEvery;
      if (!accepting) wake = std::min(wake, accept_paused_until);
      for (const Waiting& w : waiting) {
        const bool later = now < w.recheck;
        fds.push_back({w.fd, static_cast<short>(later ? POLLRDHUP : POLLIN | POLLRDHUP), 0});
        wake = std::min(wake, later ? w.recheck : w.deadline);
      }
      const auto timeout = std::chrono::ceil<milliseconds>(wake - now).count();
      const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(timeout, 0)));
      if (ready < 0 && errno != EINTR) {
        log::error("{}: poll failed: {}", options.name, std::strerror(errno));
        std::this_thread::sleep_for(kMinAcceptPause);
      }
      if (stopping.load()) break;
      const Clock::time_point after = Clock::now();
      std::vector<Waiting> still;
      for (size_t i = 0; i < waiting.size(); ++i) {
        Waiting& w = waiting[i];
        const short ev = ready > 0 ? fds[i + 2].revents : 0;
        if ((ev != 0 || (w.recheck != Clock::time_point{} && after >= w.recheck)) &&
            CheckPreface(w, ev)) {
          continue;
        }
        if (after >= w.deadline) {
          ::close(w.fd);
          continue;
        }
        still.push_back(w);
      }
      waiting.swap(still);
      Count();
      if (after - last_prune >= kPruneEvery) Prune();
      if (ready > 0 && (fds[1].revents & POLLIN)) AcceptAll();
    }
    for (const Waiting& w : waiting) ::close(w.fd);
    waiting.clear();
    handed.clear();
    Count();
  }
};

ConnectionGate::ConnectionGate() : impl_(std::make_unique<Impl>()) {}

ConnectionGate::~ConnectionGate() { Stop(); }

Status ConnectionGate::Start(Options options, Handoff handoff) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& m = *impl_;
  if (m.started) return Status(StatusCode::kFailedPrecondition, "the connection gate was already started");
  if (options.max_connections <= 0 || options.handshake_timeout_ms <= 0) {
    return Err(StatusCode::kInvalidArgument, "{}: max_connections and handshake_timeout_ms must be > 0",
               options.name);
  }
  std::string why;
  m.listen_fd = Listen(options.host, options.port, &why);
  if (m.listen_fd < 0) {
    return Err(StatusCode::kFailedPrecondition, "{}: cannot listen on {}:{}: {}", options.name,
               options.host, options.port, why);
  }
  m.wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (m.wake_fd < 0) {
    ::close(m.listen_fd);
    m.listen_fd = -1;
    return Err(StatusCode::kFailedPrecondition, "{}: eventfd: {}", options.name, std::strerror(errno));
  }
  m.port = BoundPort(m.listen_fd);
  m.options = std::move(options);
  m.handoff = std::move(handoff);
  m.spare.Refill();
  m.started = true;
  m.thread = std::thread([&m] { m.Run(); });
  return Status::Ok();
}

int ConnectionGate::port() const { return impl_->port.load(); }

int ConnectionGate::num_connections() const { return impl_->open.load(); }

void ConnectionGate::Stop() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& m = *impl_;
  if (!m.started || m.stopping.exchange(true)) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(m.wake_fd, &one, sizeof(one));
  if (m.thread.joinable()) m.thread.join();
  ::close(m.listen_fd);
  ::close(m.wake_fd);
  m.listen_fd = m.wake_fd = -1;
  m.spare.Release();
}

}  // namespace tandem::runtime
