#include "transfer/tcp_backend.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "common/log_limiter.h"
#include "common/spare_descriptor.h"
#include "common/logging.h"
#include "transfer/staging.h"
#include "transfer/tcp_client.h"
#include "transfer/tcp_serve.h"
#include "transfer/tcp_wire.h"

namespace tandem::transfer {

namespace {

using namespace tcp;  // NOLINT

struct TcpParams {
  std::string host = "127.0.0.1";
  std::string advertise_host;
  uint16_t port = 0;
  int num_connections = 2;
  uint64_t stripe_min_bytes = 4ull << 20;
  int io_timeout_ms = 30000;
  int connect_timeout_ms = 5000;
  int handshake_timeout_ms = 5000;
  int max_connections = 512;
  uint64_t staging_chunk_bytes = kDefaultStagingChunkBytes;
};

Result<TcpParams> ParseParams(const BackendParams& params) {
  TcpParams p;
  try {
    for (const auto& [key, value] : params) {
      if (key == "host") {
        p.host = value;
      } else if (key == "advertise_host") {
        p.advertise_host = value;
      } else if (key == "port") {
        int port = std::stoi(value);
        if (port < 0 || port > 65535) throw std::out_of_range(key);
        p.port = static_cast<uint16_t>(port);
      } else if (key == "num_connections") {
        p.num_connections = std::stoi(value);
        if (p.num_connections < 1 || p.num_connections > 64) throw std::out_of_range(key);
      } else if (key == "stripe_min_bytes") {
        p.stripe_min_bytes = std::stoull(value);
      } else if (key == "io_timeout_ms") {
        p.io_timeout_ms = std::stoi(value);
      } else if (key == "connect_timeout_ms") {
        p.connect_timeout_ms = std::stoi(value);
      } else if (key == "handshake_timeout_ms") {
        p.handshake_timeout_ms = std::stoi(value);
        if (p.handshake_timeout_ms < 1) throw std::out_of_range(key);
      } else if (key == "max_connections") {
        p.max_connections = std::stoi(value);
        if (p.max_connections < 1) throw std::out_of_range(key);
      } else if (key == "staging_chunk_bytes") {
        p.staging_chunk_bytes = std::stoull(value);
        if (p.staging_chunk_bytes < 4096 || p.staging_chunk_bytes > (1ull << 30)) throw std::out_of_range(key);
      } else {
        return Err(StatusCode::kInvalidArgument, "tcp backend: unknown parameter '{}'", key);
      }
    }
  } catch (const std::exception&) {
    return Err(StatusCode::kInvalidArgument, "tcp backend: bad parameter value");
  }
  if (p.advertise_host.empty()) p.advertise_host = p.host;
  return p;
}

// Splits `segments` (in order) into at most k pieces of about total / k bytes each.
std::vector<std::vector<Segment>> Split(const std::vector<Segment>& segments, uint64_t total, int k) {
  uint64_t per = (total + k - 1) / k;
  per = (per + 4095) / 4096 * 4096;
  std::vector<std::vector<Segment>> out(1);
  uint64_t filled = 0;
  for (const Segment& s : segments) {
    for (uint64_t off = 0; off < s.len;) {
      if (filled == per) {
        out.emplace_back();
        filled = 0;
      }
      uint64_t take = std::min(s.len - off, per - filled);
      out.back().push_back({s.local_addr + off, s.remote_addr + off, take, s.local_device, s.remote_device});
      filled += take;
      off += take;
    }
  }
  return out;
}

constexpr int kMinAcceptPauseMs = 50;
constexpr int kMaxAcceptPauseMs = 1000;

struct ServerConn {
  int fd = -1;
  std::thread thread;
  std::atomic<bool> done{false};
};

class TcpBackend final : public Backend {
 public:
  TcpBackend(BackendHost& host, TcpParams p, int listen_fd, uint16_t port)
      : host_(host), params_(std::move(p)), listen_fd_(listen_fd), port_(port) {
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~TcpBackend() override { Shutdown(); }

  const std::string& name() const override {
    static const std::string kName = "tcp";
    return kName;
  }
  BackendCapabilities capabilities() const override {
    BackendCapabilities c;
    c.host_memory = true;
    c.device_memory = host_.device_copier() != nullptr;  // staged through pinned host buffers
    c.device_staged = c.device_memory;
    c.same_process = c.same_node = c.remote = true;
    c.priority = 10;
    return c;
  }
  std::string ConnectionInfo() const override {
    bool v6 = params_.advertise_host.find(':') != std::string::npos;
    return v6 ? fmt::format("[{}]:{}", params_.advertise_host, port_) : fmt::format("{}:{}", params_.advertise_host, port_);
  }

  Status LoadPeer(const AgentMetadata& md) override {
    ClientConn::Target target;
    TANDEM_RETURN_IF_ERROR(ParseHostPort(md.backends.at("tcp"), &target.host, &target.port));
    target.peer_name = md.name;
    target.instance_id = md.instance_id;
    std::lock_guard lock(mu_);
    auto it = peers_.find(md.name);
    if (it != peers_.end()) {
      const auto& old = it->second.target;
      if (old.instance_id == target.instance_id && old.host == target.host && old.port == target.port) {
        return Status::Ok();
      }
      RetireLocked(it->second, "peer metadata replaced");
    }
    peers_[md.name] = Peer{std::move(target), {}};
    return Status::Ok();
  }

  void InvalidatePeer(const std::string& peer_name) override {
    std::lock_guard lock(mu_);
    auto it = peers_.find(peer_name);
    if (it == peers_.end()) return;
    RetireLocked(it->second, "peer invalidated");
    peers_.erase(it);
  }

  Status Post(std::shared_ptr<TransferRequest> req) override {
    if (req->local_kind == MemoryKind::kDevice && !host_.device_copier()) {
      return Err(StatusCode::kFailedPrecondition,
                 "agent {} has no DeviceCopier: the tcp backend cannot stage its device memory",
                 host_.agent_name());
    }
    auto t = std::make_shared<TcpTransfer>();
    t->request = req;
    std::vector<std::pair<std::shared_ptr<ClientConn>, std::shared_ptr<Stripe>>> plan;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return Err(StatusCode::kFailedPrecondition, "tcp backend is shut down");
      auto it = peers_.find(req->peer);
      if (it == peers_.end()) return Err(StatusCode::kNotFound, "tcp backend does not know peer {}", req->peer);
      Peer& peer = it->second;
      ReapLocked();
      peer.conns.resize(params_.num_connections);
      for (auto& c : peer.conns) {
        if (c && c->broken()) {
          graveyard_.push_back(std::move(c));
          c.reset();
        }
        if (!c) {
          c = std::make_shared<ClientConn>(peer.target, host_.agent_name(), params_.connect_timeout_ms,
                                           host_.device_copier(), params_.staging_chunk_bytes);
          c->Start();
        }
      }
      FrameType type = req->op == Op::kWrite ? FrameType::kWrite : FrameType::kRead;
      std::vector<std::vector<Segment>> pieces;
      size_t first = 0;
      if (params_.num_connections > 1 && req->total_bytes >= params_.stripe_min_bytes) {
        pieces = Split(req->segments, req->total_bytes, params_.num_connections);
      } else {
        pieces.push_back(req->segments);
        for (size_t i = 1; i < peer.conns.size(); ++i) {  // the least loaded connection
          if (peer.conns[i]->outstanding_bytes() < peer.conns[first]->outstanding_bytes()) first = i;
        }
      }
      for (size_t i = 0; i < pieces.size(); ++i) {
        auto s = std::make_shared<Stripe>();
        s->parent = t;
        s->type = type;
        s->wire_id = NextWireId();
        for (const Segment& seg : pieces[i]) s->bytes += seg.len;
        s->segments = std::move(pieces[i]);
        plan.emplace_back(peer.conns[(first + i) % peer.conns.size()], std::move(s));
      }
      if (req->notification) {
        if (plan.size() == 1 && type == FrameType::kWrite) {
          plan[0].second->flags = kHasNotification;
          plan[0].second->aux = *req->notification;
        } else {
          t->notify_after = true;
          t->notify_conn = plan[0].first;
        }
      }
      t->remaining = static_cast<int>(plan.size());
    }
    for (auto& [conn, stripe] : plan) {
      Status st = conn->Enqueue(stripe);
      if (!st.ok() && !stripe->finished.exchange(true)) StripeDone(stripe, st);
    }
    return Status::Ok();
  }

  void Shutdown() override {
    std::vector<std::shared_ptr<ClientConn>> conns;
    std::vector<std::shared_ptr<ServerConn>> servers;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      for (auto& [name, peer] : peers_) RetireLocked(peer, "agent shutting down");
      peers_.clear();
      conns.swap(graveyard_);
      servers.swap(servers_);
    }
    for (auto& c : conns) c->Join();
    conns.clear();
    if (acceptor_.joinable()) acceptor_.join();
    ::close(listen_fd_);
    for (auto& s : servers) ::shutdown(s->fd, SHUT_RDWR);
    for (auto& s : servers) {
      s->thread.join();
      ::close(s->fd);
    }
  }

 private:
  struct Peer {
    ClientConn::Target target;
    std::vector<std::shared_ptr<ClientConn>> conns;
  };

  void RetireLocked(Peer& peer, const char* why) {
    for (auto& c : peer.conns) {
      if (!c) continue;
      c->Break(Err(StatusCode::kFailedPrecondition, "{}", why));
      graveyard_.push_back(std::move(c));
    }
    peer.conns.clear();
  }

  void ReapLocked() {
    std::erase_if(graveyard_, [](const std::shared_ptr<ClientConn>& c) { return c->finished(); });
  }

  void AcceptLoop() {
    SpareDescriptor spare;  // freed to refuse what waits when the descriptor table is full
    spare.Refill();
    int pause_ms = kMinAcceptPauseMs;
    while (!stopping_) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        const int err = errno;
        if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
          OutOfResources(err, spare);
          for (int waited = 0; waited < pause_ms && !stopping_; waited += kTickMs) {
            std::this_thread::sleep_for(std::chrono::milliseconds(kTickMs));
          }
          pause_ms = std::min(pause_ms * 2, kMaxAcceptPauseMs);
        }
        continue;  // the tick (EAGAIN), EINTR, or a failed handshake
      }
      pause_ms = kMinAcceptPauseMs;
      spare.Refill();
      SetSocketOptions(fd);
      auto conn = std::make_shared<ServerConn>();
      conn->fd = fd;
      size_t open = 0;
      {
        std::lock_guard lock(mu_);
        if (stopping_) {
          ::close(fd);
          break;
        }
        for (auto it = servers_.begin(); it != servers_.end();) {  // reap finished connections
          if ((*it)->done) {
            (*it)->thread.join();
            ::close((*it)->fd);
            it = servers_.erase(it);
          } else {
            ++it;
          }
        }
        open = servers_.size();
        if (open < static_cast<size_t>(params_.max_connections)) {
          conn->thread = std::thread([this, c = conn.get()] {
            ServeConnection(c->fd, host_, serve_options_, stopping_);
            ::shutdown(c->fd, SHUT_RDWR);
            c->done = true;
          });
          servers_.push_back(std::move(conn));
          continue;
        }
      }
      RefuseOverCap(fd);
    }
  }

  // Beyond max_connections: a kError for the peer's hello (ResourceExhausted), then close.
  void RefuseOverCap(int fd) {
    std::string msg = fmt::format("agent {}'s tcp transfer listener is at its limit of {} connections",
                                  host_.agent_name(), params_.max_connections);
    FrameHeader r;
    r.type = FrameType::kError;
    r.status_code = static_cast<uint32_t>(StatusCode::kResourceExhausted);
    r.aux_len = static_cast<uint32_t>(msg.size());
    auto once = [](int) { return Err(StatusCode::kInternal, "refused"); };  // never wait
    if (SendAll(fd, &r, sizeof(r), once).ok()) (void)SendAll(fd, msg.data(), msg.size(), once);
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
    uint64_t suppressed = 0;
    if (refuse_log_.ShouldLog(&suppressed)) {
      log::warn("tcp transfer backend of {}: at its limit of {} connections, refusing new ones ({} "
                "more refused since the last such line)", host_.agent_name(),
                params_.max_connections, suppressed);
    }
  }

  // accept() out of descriptors or memory: refuse the waiting connections through the spare
  // descriptor (they see a close, not a hang), one warning per 10 s at most.
  void OutOfResources(int err, SpareDescriptor& spare) {
    const int refused = err == EMFILE || err == ENFILE ? spare.RefuseWaiting(listen_fd_) : 0;
    uint64_t suppressed = 0;
    if (accept_log_.ShouldLog(&suppressed)) {
      log::warn("tcp transfer backend of {}: accept failed: {}{}; refused {} waiting, pausing "
                "accepts up to {} ms at a time ({} more failures since the last such line)",
                host_.agent_name(), std::strerror(err),
                err == EMFILE || err == ENFILE ? " (RLIMIT_NOFILE reached?)" : "", refused,
                kMaxAcceptPauseMs, suppressed);
    }
  }

  BackendHost& host_;
  const TcpParams params_;
  const ServeOptions serve_options_{params_.handshake_timeout_ms, params_.io_timeout_ms, params_.staging_chunk_bytes};
  const int listen_fd_;
  const uint16_t port_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::map<std::string, Peer> peers_;
  std::vector<std::shared_ptr<ClientConn>> graveyard_;  // broken or retired, threads ending
  std::vector<std::shared_ptr<ServerConn>> servers_;
  LogLimiter accept_log_{std::chrono::seconds(10)};
  LogLimiter refuse_log_{std::chrono::seconds(10)};
  std::thread acceptor_;
};

}  // namespace

Result<std::unique_ptr<Backend>> MakeTcpBackend(BackendHost& host, const BackendParams& params) {
  TANDEM_ASSIGN_OR_RETURN(TcpParams p, ParseParams(params));
  uint16_t port = 0;
  TANDEM_ASSIGN_OR_RETURN(int fd, Listen(p.host, p.port, &port));
  return std::unique_ptr<Backend>(std::make_unique<TcpBackend>(host, std::move(p), fd, port));
}

}  // namespace tandem::transfer
