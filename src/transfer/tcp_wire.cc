#include "transfer/tcp_wire.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace tandem::transfer::tcp {

namespace {

Status Errno(const char* what) { return Err(StatusCode::kInternal, "{}: {}", what, std::strerror(errno)); }

}  // namespace

Status SendAll(int fd, const void* data, uint64_t len, const Tick& tick) {
  const char* p = static_cast<const char*>(data);
  int idle = 0;
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= static_cast<uint64_t>(n);
      idle = 0;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      TANDEM_RETURN_IF_ERROR(tick(++idle));
    } else {
      return Errno("send to peer");
    }
  }
  return Status::Ok();
}

Status RecvAll(int fd, void* data, uint64_t len, const Tick& tick) {
  char* p = static_cast<char*>(data);
  int idle = 0;
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= static_cast<uint64_t>(n);
      idle = 0;
    } else if (n == 0) {
      return Err(StatusCode::kInternal, "connection closed by peer");
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      TANDEM_RETURN_IF_ERROR(tick(++idle));
    } else {
      return Errno("recv from peer");
    }
  }
  return Status::Ok();
}

Status Discard(int fd, uint64_t len, const Tick& tick) {
  std::vector<char> scratch(1 << 16);
  while (len > 0) {
    uint64_t n = std::min<uint64_t>(len, scratch.size());
    TANDEM_RETURN_IF_ERROR(RecvAll(fd, scratch.data(), n, tick));
    len -= n;
  }
  return Status::Ok();
}

void SetSocketOptions(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  timeval tv{0, kTickMs * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

namespace {

Result<addrinfo*> Resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || !res) return Err(StatusCode::kInvalidArgument, "cannot resolve {}: {}", host, gai_strerror(rc));
  return res;
}

}  // namespace

Result<int> Listen(const std::string& host, uint16_t port, uint16_t* bound_port) {
  TANDEM_ASSIGN_OR_RETURN(addrinfo * res, Resolve(host, port, true));
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return Errno("socket");
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
    Status st = Err(StatusCode::kInternal, "tcp transfer backend cannot listen on {}:{}: {}", host, port,
                    std::strerror(errno));
    freeaddrinfo(res);
    ::close(fd);
    return st;
  }
  freeaddrinfo(res);
  sockaddr_storage addr{};
  socklen_t alen = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen);
  *bound_port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                           : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  timeval tv{0, kTickMs * 1000};  // accept() wakes up every tick
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

Result<int> Connect(const std::string& host, uint16_t port, int timeout_ms, const Tick& tick) {
  TANDEM_ASSIGN_OR_RETURN(addrinfo * res, Resolve(host, port, false));
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return Errno("socket");
  }
  int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  Status st;
  if (rc != 0 && errno != EINPROGRESS) {
    st = Err(StatusCode::kInternal, "connect to {}:{}: {}", host, port, std::strerror(errno));
  }
  for (int waited = 0; st.ok() && rc != 0;) {
    pollfd p{fd, POLLOUT, 0};
    int n = ::poll(&p, 1, kTickMs);
    if (n > 0) {
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) st = Err(StatusCode::kInternal, "connect to {}:{}: {}", host, port, std::strerror(err));
      break;
    }
    waited += kTickMs;
    if (waited >= timeout_ms) {
      st = Err(StatusCode::kInternal, "connect to {}:{} timed out after {} ms", host, port, timeout_ms);
    } else {
      st = tick(waited / kTickMs);
    }
  }
  if (!st.ok()) {
    ::close(fd);
    return st;
  }
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  SetSocketOptions(fd);
  return fd;
}

Status ParseHostPort(const std::string& s, std::string* host, uint16_t* port) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) return Err(StatusCode::kInvalidArgument, "bad host:port '{}'", s);
  *host = s.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  try {
    int p = std::stoi(s.substr(colon + 1));
    if (p <= 0 || p > 65535) throw std::out_of_range("port");
    *port = static_cast<uint16_t>(p);
  } catch (const std::exception&) {
    return Err(StatusCode::kInvalidArgument, "bad port in '{}'", s);
  }
  return Status::Ok();
}

}  // namespace tandem::transfer::tcp
