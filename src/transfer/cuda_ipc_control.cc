#include "transfer/cuda_ipc_control.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include "common/log_limiter.h"
#include "common/logging.h"
#include "transfer/region_table.h"
#include "transfer/tcp_wire.h"

namespace tandem::transfer::ipc {

namespace {

struct WireRange {
  uint64_t addr = 0;
  uint64_t len = 0;
  int32_t device_id = 0;
  uint32_t reserved = 0;
};
static_assert(sizeof(WireRange) == 24);

sockaddr_un Address(const std::string& name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  // Abstract namespace: a leading NUL instead of '@'; gone with the socket, no file to clean up.
  std::string path = name;
  if (!path.empty() && path[0] == '@') path[0] = '\0';
  path.resize(std::min(path.size(), sizeof(a.sun_path)));
  std::memcpy(a.sun_path, path.data(), path.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
  return a;
}

void SetTick(int fd) {
  timeval tv{0, tcp::kTickMs * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

Status SendMsg(int fd, MsgHeader h, std::span<const Descriptor> ranges, const std::string& aux, const tcp::Tick& tick) {
  h.num_ranges = static_cast<uint32_t>(ranges.size());
  h.aux_len = static_cast<uint32_t>(aux.size());
  std::string buf(reinterpret_cast<const char*>(&h), sizeof(h));
  for (const Descriptor& d : ranges) {
    WireRange w{d.addr, d.len, d.device_id, 0};
    buf.append(reinterpret_cast<const char*>(&w), sizeof(w));
  }
  buf += aux;
  return tcp::SendAll(fd, buf.data(), buf.size(), tick);
}

// Reads one message after its first byte arrived through `first` (which may wait forever).
Status RecvMsg(int fd, MsgHeader* h, std::vector<Descriptor>* ranges, std::string* aux, const tcp::Tick& first,
               const tcp::Tick& rest) {
  auto* bytes = reinterpret_cast<char*>(h);
  TANDEM_RETURN_IF_ERROR(tcp::RecvAll(fd, bytes, 1, first));
  TANDEM_RETURN_IF_ERROR(tcp::RecvAll(fd, bytes + 1, sizeof(*h) - 1, rest));
  if (h->magic == kMagicV1) {
    return Err(StatusCode::kDataLoss, "cuda_ipc control: the peer speaks the first protocol (an older tandem "
               "build: END answered); this build speaks the second");
  }
  if (h->magic != kMagic || h->num_ranges > kMaxRanges || h->aux_len > kMaxAux) {
    return Err(StatusCode::kDataLoss, "cuda_ipc control: malformed message");
  }
  std::vector<WireRange> wire;
  TANDEM_RETURN_IF_ERROR(tcp::RecvArray(fd, &wire, h->num_ranges, rest));
  TANDEM_RETURN_IF_ERROR(tcp::RecvArray(fd, aux, h->aux_len, rest));
  ranges->clear();
  for (const WireRange& w : wire) ranges->push_back({w.addr, w.len, w.device_id});
  return Status::Ok();
}

// Polls `fd` for readable data for up to `spin_us` (0: not at all), yielding between polls, so
// that a message arriving meanwhile is read without the wake-up of a thread asleep in recv (some
// microseconds, more from a deep idle state). Returns at once on data, end of stream or an error:
// the recv after it sees them.
void SpinForData(int fd, int spin_us) {
  if (spin_us <= 0) return;
  const auto until = Clock::now() + std::chrono::microseconds(spin_us);
  char c = 0;
  do {
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return;
    std::this_thread::yield();
  } while (Clock::now() < until);
}

}  // namespace

std::string SocketName(const std::string& instance_id) { return "@tandem-cuda-ipc-" + instance_id; }

// ---------------------------------------------------------------- initiator

Result<std::shared_ptr<ControlConn>> ControlConn::Connect(const std::string& socket_name, const std::string& my_name,
                                                          const std::string& peer_name,
                                                          const std::string& peer_instance,
                                                          Clock::time_point deadline,
                                                          const std::atomic<bool>& stopping, int spin_us) {
  socklen_t len = 0;
  sockaddr_un a = Address(socket_name, &len);
  int fd = -1;
  for (;;) {
    fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Err(StatusCode::kInternal, "socket: {}", std::strerror(errno));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), len) == 0) break;
    const int err = errno;
    ::close(fd);
    if (err == ECONNREFUSED || err == ENOENT) {
      return Err(StatusCode::kNotFound, "peer {} is gone: nothing listens on its cuda_ipc control socket {}",
                 peer_name, socket_name);
    }
    if (err != EAGAIN && err != EINTR) {
      return Err(StatusCode::kInternal, "connect to peer {}'s control socket: {}", peer_name, std::strerror(err));
    }
    if (stopping || Clock::now() > deadline) {
      return Err(StatusCode::kInternal, "connect to peer {}'s control socket timed out", peer_name);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // its backlog is full
  }
  SetTick(fd);
  std::shared_ptr<ControlConn> conn(new ControlConn(fd, peer_name, spin_us));
  Status st = conn->Call(MsgType::kHello, 0, 0, {}, my_name + "\n" + peer_instance, deadline, stopping);
  if (!st.ok()) return st;
  return conn;
}

ControlConn::~ControlConn() { ::close(fd_); }

void ControlConn::Break() {
  broken_ = true;
  ::shutdown(fd_, SHUT_RDWR);
}

Status ControlConn::Broke(Status st) {
  if (st.message().find("connection closed") != std::string::npos ||
      st.message().find("Connection reset") != std::string::npos ||
      st.message().find("Broken pipe") != std::string::npos) {
    st = Err(StatusCode::kNotFound, "peer {} is gone: {}", peer_name_, st.message());
  }
  broken_ = true;
  ::shutdown(fd_, SHUT_RDWR);
  return st;
}

std::function<Status(int)> ControlConn::TickUntil(Clock::time_point deadline, const std::atomic<bool>& stopping,
                                                   const char* what) const {
  return [this, deadline, &stopping, what](int) -> Status {
    if (stopping) return Err(StatusCode::kFailedPrecondition, "cuda_ipc backend shutting down");
    if (broken_) return Err(StatusCode::kNotFound, "peer {} is gone: its control connection was closed", peer_name_);
    if (Clock::now() > deadline) return Err(StatusCode::kInternal, "timed out {} peer {}", what, peer_name_);
    return Status::Ok();
  };
}

Status ControlConn::SendOne(MsgType type, uint64_t xfer_id, uint16_t flags, std::span<const Descriptor> ranges,
                            const std::string& aux, const std::function<Status(int)>& tick) {
  MsgHeader h;
  h.type = type;
  h.flags = flags;
  h.xfer_id = xfer_id;
  std::lock_guard send_lock(send_mu_);
  return SendMsg(fd_, h, ranges, aux, tick);
}

Status ControlConn::Call(MsgType type, uint64_t xfer_id, uint16_t flags, std::span<const Descriptor> ranges,
                         const std::string& aux, Clock::time_point deadline, const std::atomic<bool>& stopping) {
  std::lock_guard lock(call_mu_);
  if (broken_) return Err(StatusCode::kNotFound, "peer {} is gone: its control connection broke", peer_name_);
  const auto tick = TickUntil(deadline, stopping, "waiting for");
  MsgHeader r;
  std::vector<Descriptor> none;
  std::string answer;
  Status st = SendOne(type, xfer_id, flags, ranges, aux, tick);
  if (st.ok()) {
    SpinForData(fd_, spin_us_);  // the target answers within tens of microseconds
    st = RecvMsg(fd_, &r, &none, &answer, tick, tick);
  }
  if (st.ok() && r.xfer_id != xfer_id) st = Err(StatusCode::kDataLoss, "cuda_ipc control: answer out of order");
  if (!st.ok()) return Broke(std::move(st));
  if (r.type == MsgType::kOk) return Status::Ok();
  if (r.type == MsgType::kError) {
    return Status(static_cast<StatusCode>(r.status_code), fmt::format("peer {}: {}", peer_name_, answer));
  }
  Break();
  return Err(StatusCode::kDataLoss, "cuda_ipc control: unexpected answer from peer {}", peer_name_);
}

Status ControlConn::Send(MsgType type, uint64_t xfer_id, uint16_t flags, const std::string& aux,
                         Clock::time_point deadline, const std::atomic<bool>& stopping) {
  if (broken_) return Err(StatusCode::kNotFound, "peer {} is gone: its control connection broke", peer_name_);
  Status st = SendOne(type, xfer_id, flags, {}, aux, TickUntil(deadline, stopping, "sending to"));
  return st.ok() ? st : Broke(std::move(st));
}

// ---------------------------------------------------------------- target

struct ControlServer::Conn {
  int fd = -1;
  std::thread thread;
  std::atomic<bool> done{false};
};

Result<std::unique_ptr<ControlServer>> ControlServer::Start(BackendHost& host, int spin_us) {
  const std::string name = SocketName(host.instance_id());
  socklen_t len = 0;
  sockaddr_un a = Address(name, &len);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Err(StatusCode::kInternal, "socket: {}", std::strerror(errno));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd, 128) != 0) {
    Status st = Err(StatusCode::kInternal, "cuda_ipc backend cannot listen on {}: {}", name, std::strerror(errno));
    ::close(fd);
    return st;
  }
  SetTick(fd);  // accept() wakes up every tick
  std::unique_ptr<ControlServer> server(new ControlServer(host, fd, spin_us));
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

ControlServer::~ControlServer() { Stop(); }

void ControlServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (acceptor_.joinable()) acceptor_.join();
  ::close(listen_fd_);
  std::vector<std::shared_ptr<Conn>> conns;
  {
    std::lock_guard lock(mu_);
    conns.swap(conns_);
  }
  for (auto& c : conns) ::shutdown(c->fd, SHUT_RDWR);
  for (auto& c : conns) {
    c->thread.join();
    ::close(c->fd);
  }
}

void ControlServer::AcceptLoop() {
  while (!stopping_) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // the tick, EINTR
    SetTick(fd);
    auto conn = std::make_shared<Conn>();
    conn->fd = fd;
    std::lock_guard lock(mu_);
    if (stopping_) {
      ::close(fd);
      break;
    }
    std::erase_if(conns_, [](const std::shared_ptr<Conn>& c) {
      if (!c->done) return false;
      c->thread.join();
      ::close(c->fd);
      return true;
    });
    conn->thread = std::thread([this, c = conn.get()] {
      ServeControlConnection(c->fd, host_, stopping_, spin_us_);
      ::shutdown(c->fd, SHUT_RDWR);
      c->done = true;
    });
    conns_.push_back(std::move(conn));
  }
}

void ServeControlConnection(int fd, BackendHost& host, const std::atomic<bool>& stopping, int spin_us) {
  auto idle = [&](int) { return stopping ? Err(StatusCode::kFailedPrecondition, "stopping") : Status::Ok(); };
  auto stall = [&](int ticks) {
    if (stopping) return Err(StatusCode::kFailedPrecondition, "stopping");
    if (ticks * tcp::kTickMs > 30000) return Err(StatusCode::kInternal, "peer stalled mid-message");
    return Status::Ok();
  };
  auto answer = [&](uint64_t id, const Status& result) {
    MsgHeader r;
    r.xfer_id = id;
    r.type = result.ok() ? MsgType::kOk : MsgType::kError;
    r.status_code = static_cast<uint32_t>(result.code());
    return SendMsg(fd, r, {}, result.ok() ? std::string() : result.message(), stall);
  };
  MsgHeader h;
  std::vector<Descriptor> ranges;
  std::string aux;
  if (Status hello = RecvMsg(fd, &h, &ranges, &aux, stall, stall); !hello.ok() || h.type != MsgType::kHello) {
    // A peer that keeps sending garbage (or a fuzzer) would flood the log: one line per 10 s.
    static LogLimiter refused_log;
    uint64_t quiet = 0;
    if (hello.code() == StatusCode::kDataLoss && refused_log.ShouldLog(&quiet)) {
      log::warn("cuda_ipc control: a peer refused: {} ({} more since the last such line)",
                hello.message(), quiet);
    }
    return;
  }
  const auto nl = aux.find('\n');
  const std::string peer = aux.substr(0, nl);
  if (nl == std::string::npos || aux.substr(nl + 1) != host.instance_id()) {
    (void)answer(h.xfer_id, Err(StatusCode::kFailedPrecondition, "this socket is agent {} instance {}",
                                host.agent_name(), host.instance_id()));
    return;
  }
  if (!answer(h.xfer_id, Status::Ok()).ok()) return;
  std::map<uint64_t, RegionPin> pins;  // released when the connection ends
  for (;;) {
    // The next message often follows soon (BEGIN after END, a layer's BEGIN after the last one's).
    SpinForData(fd, spin_us);
    if (!RecvMsg(fd, &h, &ranges, &aux, idle, stall).ok()) return;
    Status result;
    if (h.type == MsgType::kBegin) {
      // Our side of the bounds check; the pin holds the registrations until END.
      auto pin = host.PinRegistered(MemoryKind::kDevice, ranges);
      if (pin.ok()) {
        pins[h.xfer_id] = std::move(pin).value();
      } else {
        result = pin.status();
      }
    } else if (h.type == MsgType::kEnd) {
      auto it = pins.find(h.xfer_id);
      if (it != pins.end()) {
        it->second.Release();
        pins.erase(it);
      }
      // The initiator saw its copies land before sending END: the data is there. No answer.
      if ((h.flags & kSuccess) && (h.flags & kHasNotification)) host.DeliverNotification({peer, aux});
      continue;
    } else {
      return;
    }
    if (!answer(h.xfer_id, result).ok()) return;
  }
}

}  // namespace tandem::transfer::ipc
