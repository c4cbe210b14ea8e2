#include "transfer/libfabric_backend.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/logging.h"
#include "transfer/libfabric_internal.h"
#include "transfer/libfabric_loader.h"

namespace tandem::transfer {

namespace fabric {

namespace {

constexpr size_t kCqBatch = 64;

Result<FiParams> ParseParams(const BackendParams& params) {
  FiParams p;
  for (const auto& [key, value] : params) {
    if (key == "provider") {
      p.provider = value;
    } else if (key == "host") {
      p.host = value;
    } else if (key == "port") {
      p.port = value;
    } else if (key == "priority") {
      try {
        p.priority = std::stoi(value);
      } catch (const std::exception&) {
        return Err(StatusCode::kInvalidArgument, "libfabric backend: bad priority '{}'", value);
      }
    } else {
      return Err(StatusCode::kInvalidArgument, "libfabric backend: unknown parameter '{}'", key);
    }
  }
  return p;
}

}  // namespace

Status LibfabricBackend::Init() {
  TANDEM_RETURN_IF_ERROR(fi_.Open(params_));
  slab_.assign((kNumRecv + kNumSend) * kBufBytes, 0);
  if (fi_.mr_mode() & FI_MR_LOCAL) {
    int rc = fi_mr_reg(fi_.domain(), slab_.data(), slab_.size(), FI_SEND | FI_RECV, 0, next_key_++, 0, &slab_mr_,
                       nullptr);
    if (rc) return FiError("fi_mr_reg(control buffers)", rc);
  }
  for (size_t i = 0; i < kNumSend; ++i) free_send_.push_back(kNumRecv + i);
  TANDEM_RETURN_IF_ERROR(PostReceives());
  connection_info_ = EncodeConnectionInfo(fi_.provider(), fi_.addr_format(), fi_.address());
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (wake_fd_ < 0 || epoll_fd_ < 0) return Err(StatusCode::kInternal, "libfabric backend: eventfd/epoll failed");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  WatchCqFd();
  log::debug("libfabric backend of {}: provider {}, mr_mode {:#x}, delivery complete {}, cq fd {}",
             host().agent_name(), fi_.provider(), fi_.mr_mode(), fi_.delivery_complete(), fi_.wait_fd());
  StartProgressThread();
  return Status::Ok();
}

OpCtx* LibfabricBackend::NewOp(OpCtx::Kind kind) {
  auto* op = new OpCtx();
  op->kind = kind;
  ops_.insert(op);
  return op;
}

void LibfabricBackend::DropOp(OpCtx* op) {
  ops_.erase(op);
  delete op;
}

void LibfabricBackend::WatchCqFd() {
  if (epoll_cq_fd_ >= 0) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, epoll_cq_fd_, nullptr);
  epoll_cq_fd_ = fi_.wait_fd();
  if (epoll_cq_fd_ < 0) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, epoll_cq_fd_, &ev);
}

Status LibfabricBackend::PostRecv(size_t i) {
  OpCtx* op = NewOp(OpCtx::kRecv);
  op->buf = i;
  ssize_t rc = fi_recv(fi_.ep(), Buf(i), kBufBytes, SlabDesc(), FI_ADDR_UNSPEC, &op->ctx);
  if (rc == 0) return Status::Ok();
  DropOp(op);
  if (rc == -FI_EAGAIN) {
    repost_.push_back(i);
    return Status::Ok();
  }
  return FiError("fi_recv", rc);
}

Status LibfabricBackend::PostReceives() {
  for (size_t i = 0; i < kNumRecv; ++i) TANDEM_RETURN_IF_ERROR(PostRecv(i));
  return Status::Ok();
}

bool LibfabricBackend::EnsureInserted(Link& link) {
  if (link.generation == generation_) return true;
  fi_addr_t addr = FI_ADDR_UNSPEC;
  if (fi_av_insert(fi_.av(), link.address.data(), 1, &addr, 0, nullptr) != 1) return false;
  link.addr = addr;
  link.generation = generation_;
  return true;
}

// Once no operation to a broken or released address is in flight, it leaves the AV (tcp;ofi_rxm
// keeps a broken connection per address: the next insert makes a new one).
void LibfabricBackend::MaybeReset(Link& link) {
  if (link.outstanding > 0 || !(link.broken || link.released)) return;
  if (link.generation == generation_) fi_av_remove(fi_.av(), &link.addr, 1, 0);
  link.generation = 0;
  link.broken = false;
}

void LibfabricBackend::LinkFailed(const std::shared_ptr<Link>& link, const Status& why) {
  if (!link->broken) {
    link->broken = true;
    if (link->peer) {
      PeerBroken(*link->peer, why);
    } else {
      reply_links_.erase(link->address);
    }
  }
  MaybeReset(*link);
}

Status LibfabricBackend::Send(const std::shared_ptr<Link>& link, std::string bytes) {
  if (!fi_.open()) return Err(StatusCode::kFailedPrecondition, "libfabric endpoint is closed");
  if (bytes.size() > kBufBytes) {
    return Err(StatusCode::kInvalidArgument, "libfabric: a control message of {} bytes", bytes.size());
  }
  if (link->broken) return Err(StatusCode::kInternal, "libfabric: the connection to {} broke", DescribeLink(*link));
  link->outstanding++;
  pending_sends_.emplace_back(link, std::move(bytes));
  FlushSends();
  return Status::Ok();
}

// Posts the queued control messages it can, in order per address; an address whose send answers
// -FI_EAGAIN (its connection is busy, or its peer stopped) waits without blocking the others.
void LibfabricBackend::FlushSends() {
  std::set<Link*> busy;
  std::vector<std::pair<std::shared_ptr<Link>, Status>> failed;
  for (auto it = pending_sends_.begin(); it != pending_sends_.end() && !free_send_.empty() && fi_.open();) {
    std::shared_ptr<Link> link = it->first;
    if (busy.count(link.get())) {
      ++it;
      continue;
    }
    if (link->broken || link->released) {  // dropped: the transfer it belonged to has failed
      link->outstanding--;
      failed.emplace_back(link, Status::Ok());
      it = pending_sends_.erase(it);
      continue;
    }
    if (!EnsureInserted(*link)) {
      link->outstanding--;
      failed.emplace_back(link, Err(StatusCode::kInternal, "libfabric: fi_av_insert of {} failed", DescribeLink(*link)));
      it = pending_sends_.erase(it);
      continue;
    }
    const std::string& bytes = it->second;
    size_t slot = free_send_.back();
    std::memcpy(Buf(slot), bytes.data(), bytes.size());
    OpCtx* op = NewOp(OpCtx::kSend);
    op->buf = slot;
    op->link = link;
    ssize_t rc = fi_send(fi_.ep(), Buf(slot), bytes.size(), SlabDesc(), link->addr, &op->ctx);
    if (rc == -FI_EAGAIN) {
      DropOp(op);
      busy.insert(link.get());
      ++it;
      continue;
    }
    it = pending_sends_.erase(it);
    if (rc != 0) {
      DropOp(op);
      link->outstanding--;
      failed.emplace_back(link, FiError(fmt::format("fi_send to {}", DescribeLink(*link)), rc));
      continue;
    }
    free_send_.pop_back();
  }
  for (auto& [link, st] : failed) {  // after the loop: these may call back into the base
    if (st.ok()) {
      MaybeReset(*link);
    } else {
      LinkFailed(link, st);
    }
  }
}

std::shared_ptr<Link> LibfabricBackend::LinkOf(rma::Peer& peer) {
  if (!peer.conn) {
    auto conn = std::make_unique<FiConn>();
    conn->link = std::make_shared<Link>();
    conn->link->address = peer.address;
    conn->link->peer = &peer;
    links_.push_back(conn->link);
    peer.conn = std::move(conn);
  }
  return static_cast<FiConn*>(peer.conn.get())->link;
}

std::shared_ptr<Link> LibfabricBackend::ReplyLink(const std::string& address) {
  auto& link = reply_links_[address];
  if (!link) {
    link = std::make_shared<Link>();
    link->address = address;
    links_.push_back(link);
  }
  return link;
}

void* LibfabricBackend::LocalDesc(uint64_t addr, uint64_t len) const {
  if (!(fi_.mr_mode() & FI_MR_LOCAL)) return nullptr;
  for (const auto& [id, m] : mrs_) {
    if (addr >= m.addr && addr + len <= m.addr + m.len) return fi_mr_desc(m.mr);
  }
  return nullptr;
}

// ---- the base's hooks

Result<std::string> LibfabricBackend::RegisterLocal(const RegionInfo& region) {
  if (!fi_.domain()) return Err(StatusCode::kFailedPrecondition, "libfabric backend is shut down");
  LocalMr m{region.addr, region.len, next_key_++, nullptr};
  int rc = fi_mr_reg(fi_.domain(), reinterpret_cast<void*>(region.addr), region.len,
                     FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, m.key, 0, &m.mr, nullptr);
  if (rc) return FiError("fi_mr_reg", rc);
  if (fi_.mr_mode() & FI_MR_PROV_KEY) m.key = fi_mr_key(m.mr);
  mrs_[region.id] = m;
  return EncodeRegionKey(m.key, region.addr);
}

void LibfabricBackend::DeregisterLocal(const RegionInfo& region) {
  auto it = mrs_.find(region.id);
  if (it == mrs_.end()) return;
  fi_close(&it->second.mr->fid);
  mrs_.erase(it);
}

Result<std::string> LibfabricBackend::LocalKey(uint64_t addr, uint64_t len) {
  for (const auto& [id, m] : mrs_) {
    if (addr >= m.addr && addr + len <= m.addr + m.len) return EncodeRegionKey(m.key, m.addr);
  }
  return Err(StatusCode::kInvalidArgument, "libfabric: local range {:#x}+{} is not registered", addr, len);
}

Result<std::string> LibfabricBackend::ParseAddress(const std::string& info) const {
  TANDEM_ASSIGN_OR_RETURN(PeerAddress a, DecodeConnectionInfo(info));
  if (a.provider != fi_.provider() || a.addr_format != fi_.addr_format()) {
    return Err(StatusCode::kFailedPrecondition, "libfabric: the peer uses provider {} (address format {}), we {} ({})",
               a.provider, a.addr_format, fi_.provider(), fi_.addr_format());
  }
  return a.address;
}

bool LibfabricBackend::Connected(const rma::Peer& peer) const {
  auto* conn = static_cast<const FiConn*>(peer.conn.get());
  return conn && !conn->link->broken && fi_.open();
}

// With nothing in flight to the peer nothing would report its death: a kPing does (its send fails
// once the connection broke).
void LibfabricBackend::KeepAlive(rma::Peer& peer) {
  auto link = LinkOf(peer);
  if (link->broken || link->outstanding > 0 || !fi_.open()) return;
  rma::ControlMessage ping;
  ping.type = rma::ControlType::kPing;
  ping.initiator = host().agent_name();
  ping.initiator_instance = host().instance_id();
  ping.reply_address = fi_.address();
  (void)Send(link, rma::EncodeControl(ping));
}

void LibfabricBackend::ReleasePeer(rma::Peer& peer) {
  auto* conn = static_cast<FiConn*>(peer.conn.get());
  if (!conn) return;
  conn->link->peer = nullptr;
  conn->link->released = true;
  if (fi_.open()) MaybeReset(*conn->link);
  peer.conn.reset();
}

int LibfabricBackend::Progress() {
  if (!fi_.open()) return 0;
  int n = 0;
  for (int round = 0; round < 16; ++round) {
    fi_cq_msg_entry entries[kCqBatch];
    ssize_t k = fi_cq_read(fi_.cq(), entries, kCqBatch);
    if (k > 0) {
      for (ssize_t i = 0; i < k && fi_.open(); ++i) {
        OnCompletion(reinterpret_cast<OpCtx*>(entries[i].op_context), Status::Ok(), entries[i].len);
      }
      n += static_cast<int>(k);
      continue;
    }
    if (k != -FI_EAVAIL) break;
    fi_cq_err_entry err{};
    if (fi_cq_readerr(fi_.cq(), &err, 0) <= 0) break;
    char text[256] = {};
    const char* prov = fi_cq_strerror(fi_.cq(), err.prov_errno, err.err_data, text, sizeof(text));
    Status st = Err(StatusCode::kInternal, "libfabric: {} ({})", fi_strerror(err.err), prov ? prov : "");
    OnCompletion(reinterpret_cast<OpCtx*>(err.op_context), st, 0);
    n++;
  }
  std::vector<size_t> repost;
  repost.swap(repost_);
  for (size_t i : repost) (void)PostRecv(i);
  FlushSends();
  std::vector<uint64_t> issuing = issuing_;
  for (uint64_t id : issuing) Issue(id);
  ExpirePushes();
  return n;
}

void LibfabricBackend::WaitEvents(int timeout_ms) {
  if (!pending_sends_.empty() || !issuing_.empty() || !repost_.empty()) timeout_ms = std::min(timeout_ms, 1);
  if (!data_.empty()) timeout_ms = std::min(timeout_ms, 5);  // push deadlines
  if (fi_.open() && epoll_cq_fd_ >= 0) {
    fid* fids[1] = {&fi_.cq()->fid};
    if (fi_trywait(fi_.fabric(), fids, 1) != FI_SUCCESS) return;  // completions are waiting
  } else {
    timeout_ms = std::min(timeout_ms, 1);  // no fd: poll
  }
  epoll_event evs[4];
  ::epoll_wait(epoll_fd_, evs, 4, timeout_ms);
  uint64_t v;
  while (::read(wake_fd_, &v, sizeof(v)) > 0) {
  }
}

void LibfabricBackend::Wake() {
  uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof(one));
}

void LibfabricBackend::StopTransport() {
  if (stopping_) return;
  stopping_ = true;
  Recover(Err(StatusCode::kFailedPrecondition, "libfabric backend shutting down"));  // closes, no reopen
  for (auto& [id, m] : mrs_) fi_close(&m.mr->fid);
  mrs_.clear();
  if (slab_mr_) fi_close(&slab_mr_->fid);
  slab_mr_ = nullptr;
  fi_.Close();
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  epoll_fd_ = wake_fd_ = -1;
}

}  // namespace fabric

Result<std::unique_ptr<Backend>> MakeLibfabricBackend(BackendHost& host, const BackendParams& params) {
  TANDEM_ASSIGN_OR_RETURN(fabric::FiParams p, fabric::ParseParams(params));
  // libfabric is opened here, not at start (libfabric_loader.h).
  TANDEM_RETURN_IF_ERROR(LoadLibfabric());
  BackendCapabilities caps;
  caps.host_memory = true;
  caps.same_process = caps.same_node = caps.remote = true;
  caps.priority = p.priority;
  auto backend = std::make_unique<fabric::LibfabricBackend>(host, std::move(p), caps);
  TANDEM_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace tandem::transfer
