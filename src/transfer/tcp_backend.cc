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
            Serve(c->fd);
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

  Status Respond(int fd, uint64_t id, const Status& result, const Tick& tick) {
    FrameHeader r;
    r.xfer_id = id;
    std::string aux;
    if (result.ok()) {
      r.type = FrameType::kAck;
    } else {
      r.type = FrameType::kError;
      r.status_code = static_cast<uint32_t>(result.code());
      aux = result.message();
      r.aux_len = static_cast<uint32_t>(aux.size());
    }
    TANDEM_RETURN_IF_ERROR(SendAll(fd, &r, sizeof(r), tick));
    return SendAll(fd, aux.data(), aux.size(), tick);
  }

  // One accepted connection: the hello, then requests until it closes.
  void Serve(int fd) {
    // The hello must arrive (and its answer leave) within handshake_timeout_ms of the accept.
    const auto accepted = std::chrono::steady_clock::now();
    auto handshake = [&](int) {
      if (stopping_) return Err(StatusCode::kFailedPrecondition, "stopping");
      if (std::chrono::steady_clock::now() - accepted >
          std::chrono::milliseconds(params_.handshake_timeout_ms)) {
        log::debug("tcp transfer backend of {}: dropped a connection without a hello within {} ms",
                   host_.agent_name(), params_.handshake_timeout_ms);
        return Err(StatusCode::kInternal, "no hello");
      }
      return Status::Ok();
    };
    auto idle = [&](int) { return stopping_ ? Err(StatusCode::kFailedPrecondition, "stopping") : Status::Ok(); };
    auto stall = [&](int ticks) {
      if (stopping_) return Err(StatusCode::kFailedPrecondition, "stopping");
      if (ticks * kTickMs > params_.io_timeout_ms) return Err(StatusCode::kInternal, "peer stalled mid-message");
      return Status::Ok();
    };
    FrameHeader h;
    if (!RecvAll(fd, &h, sizeof(h), handshake).ok() || h.magic != kMagic ||
        h.type != FrameType::kHello || h.aux_len > 4096) {
      return;
    }
    std::string hello(h.aux_len, '\0');
    if (!RecvAll(fd, hello.data(), hello.size(), handshake).ok()) return;
    auto nl = hello.find('\n');
    std::string peer = hello.substr(0, nl);
    if (nl == std::string::npos || hello.substr(nl + 1) != host_.instance_id()) {
      FrameHeader r;
      r.type = FrameType::kError;
      std::string msg = fmt::format("this listener is agent {} instance {}", host_.agent_name(), host_.instance_id());
      r.status_code = static_cast<uint32_t>(StatusCode::kFailedPrecondition);
      r.aux_len = static_cast<uint32_t>(msg.size());
      (void)SendAll(fd, &r, sizeof(r), handshake);
      (void)SendAll(fd, msg.data(), msg.size(), handshake);
      return;
    }
    FrameHeader ok;
    ok.type = FrameType::kHelloOk;
    if (!SendAll(fd, &ok, sizeof(ok), handshake).ok()) return;
    std::unique_ptr<Stager> stager;  // device memory of this agent, staged (created on first use)
    for (;;) {
      auto* bytes = reinterpret_cast<char*>(&h);
      if (!RecvAll(fd, bytes, 1, idle).ok() || !RecvAll(fd, bytes + 1, sizeof(h) - 1, stall).ok()) return;
      if (h.magic != kMagic || h.num_segments > kMaxSegments || h.aux_len > kMaxAux) return;
      if (h.target_kind > static_cast<uint8_t>(MemoryKind::kDevice)) return;
      const auto kind = static_cast<MemoryKind>(h.target_kind);
      std::vector<WireSegment> wire(h.num_segments);
      std::string aux(h.aux_len, '\0');
      if (!RecvAll(fd, wire.data(), wire.size() * sizeof(WireSegment), stall).ok()) return;
      if (!RecvAll(fd, aux.data(), aux.size(), stall).ok()) return;
      std::vector<Descriptor> ranges;
      uint64_t total = 0;
      for (const WireSegment& w : wire) {
        ranges.push_back({w.addr, w.len, w.device_id});
        total += w.len;
      }
      Status result;
      if (kind == MemoryKind::kDevice && (h.type == FrameType::kWrite || h.type == FrameType::kRead)) {
        if (!host_.device_copier()) {
          result = Err(StatusCode::kFailedPrecondition,
                       "agent {} has no DeviceCopier: the tcp backend cannot stage its device memory",
                       host_.agent_name());
        } else if (!stager) {
          stager = std::make_unique<Stager>(*host_.device_copier(), params_.staging_chunk_bytes);
        }
      }
      if (h.type == FrameType::kWrite) {
        if (total != h.payload_len) return;  // protocol error
        // Our side of the bounds check.
        Result<RegionPin> pin = result.ok() ? host_.PinRegistered(kind, ranges) : Result<RegionPin>(result);
        if (!pin.ok()) {
          result = pin.status();
          if (!Discard(fd, h.payload_len, stall).ok()) return;
        } else if (kind == MemoryKind::kDevice) {
          // Into pinned buffers, then onto the device; the ack goes out after the last copy landed.
          bool io_failed = false;
          result = stager->Receive(ranges, [&](void* p, uint64_t n) {
            Status st = RecvAll(fd, p, n, stall);
            io_failed = !st.ok();
            return st;
          });
          if (io_failed) return;
          pin->Release();
          if (result.ok() && (h.flags & kHasNotification)) host_.DeliverNotification({peer, aux});
        } else {
          for (const Descriptor& d : ranges) {
            if (!RecvAll(fd, reinterpret_cast<void*>(d.addr), d.len, stall).ok()) return;
          }
          pin->Release();
          if (h.flags & kHasNotification) host_.DeliverNotification({peer, aux});
        }
      } else if (h.type == FrameType::kRead) {
        Result<RegionPin> pin = result.ok() ? host_.PinRegistered(kind, ranges) : Result<RegionPin>(result);
        if (pin.ok()) {
          FrameHeader r;
          r.type = FrameType::kReadData;
          r.xfer_id = h.xfer_id;
          r.payload_len = total;
          if (!SendAll(fd, &r, sizeof(r), stall).ok()) return;
          if (kind == MemoryKind::kDevice) {
            // A device error past the header cannot be answered in band: the connection drops.
            Status st = stager->Send(ranges, [&](const void* p, uint64_t n) { return SendAll(fd, p, n, stall); });
            if (!st.ok()) {
              log::warn("tcp transfer backend of {}: READ of {} for {} failed: {}", host_.agent_name(),
                        MemoryName(kind, ranges.empty() ? 0 : ranges[0].device_id), peer, st.ToString());
              return;
            }
            continue;
          }
          for (const Descriptor& d : ranges) {
            if (!SendAll(fd, reinterpret_cast<const void*>(d.addr), d.len, stall).ok()) return;
          }
          continue;
        }
        result = pin.status();
      } else if (h.type == FrameType::kNotify) {
        host_.DeliverNotification({peer, aux});
      } else {
        return;
      }
      if (!Respond(fd, h.xfer_id, result, stall).ok()) return;
    }
  }

  BackendHost& host_;
  const TcpParams params_;
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
