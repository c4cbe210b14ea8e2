#include "transfer/libfabric_backend.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <set>

#include "common/logging.h"
#include "transfer/fabric_rma.h"
#include "transfer/libfabric_endpoint.h"

namespace tandem::transfer {

namespace {

using fabric::FiError;
using fabric::FiParams;

constexpr size_t kNumRecv = 32;  // posted receive buffers for control messages
constexpr size_t kNumSend = 32;  // send slots
constexpr size_t kBufBytes = rma::kMaxControlBytes;
constexpr size_t kCqBatch = 64;
constexpr uint64_t kMaxOpBytes = 1ull << 30;  // one RMA operation moves at most this much

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

// A peer's address in our AV (an initiator's, for replies, has no peer).
struct Link {
  std::string address;
  rma::Peer* peer = nullptr;  // null for a reply address, or once released
  fi_addr_t addr = FI_ADDR_UNSPEC;
  uint64_t generation = 0;  // of the AV the address was inserted in (0: not inserted)
  bool broken = false;      // an operation failed: removed and inserted again once idle
  bool released = false;
  int outstanding = 0;  // operations in flight to it
};

struct FiConn : rma::PeerConn {
  std::shared_ptr<Link> link;
};

// The context of one libfabric operation; libfabric's per-operation space comes first.
struct OpCtx {
  fi_context2 ctx;
  enum Kind { kData, kSend, kRecv } kind = kData;
  uint64_t xfer_id = 0;
  size_t buf = 0;  // kSend / kRecv: the control buffer
  std::shared_ptr<Link> link;
};

// The data phase of one transfer: an issue cursor (fi_write/fi_read may answer -FI_EAGAIN).
struct DataState {
  std::shared_ptr<Link> link;
  const rma::Peer* peer = nullptr;
  const std::vector<Segment>* segments = nullptr;
  Op op = Op::kWrite;
  size_t seg = 0;
  uint64_t off = 0;
  int hint = -1;
  int outstanding = 0;
  bool issued_all = false;
  Status error;
};

struct LocalMr {
  uint64_t addr = 0, len = 0;
  fid_mr* mr = nullptr;
};

class LibfabricBackend final : public rma::RmaBackend {
 public:
  LibfabricBackend(BackendHost& host, FiParams p, BackendCapabilities caps)
      : RmaBackend(host, "libfabric", caps), params_(std::move(p)) {}
  ~LibfabricBackend() override {
    Shutdown();
    StopTransport();  // when the thread never started
  }

  Status Init() {
    TANDEM_RETURN_IF_ERROR(fi_.Open(params_));
    slab_.assign((kNumRecv + kNumSend) * kBufBytes, 0);
    if (fi_.mr_mode() & FI_MR_LOCAL) {
      int rc = fi_mr_reg(fi_.domain(), slab_.data(), slab_.size(), FI_SEND | FI_RECV, 0, next_key_++, 0, &slab_mr_,
                         nullptr);
      if (rc) return FiError("fi_mr_reg(control buffers)", rc);
    }
    for (size_t i = 0; i < kNumSend; ++i) free_send_.push_back(kNumRecv + i);
    TANDEM_RETURN_IF_ERROR(PostReceives());
    connection_info_ = fabric::EncodeConnectionInfo(fi_.provider(), fi_.addr_format(), fi_.address());
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

 private:
  void* Buf(size_t i) { return slab_.data() + i * kBufBytes; }
  void* SlabDesc() { return slab_mr_ ? fi_mr_desc(slab_mr_) : nullptr; }
  OpCtx* NewOp(OpCtx::Kind kind) {
    auto* op = new OpCtx();
    op->kind = kind;
    ops_.insert(op);
    return op;
  }
  void DropOp(OpCtx* op) {
    ops_.erase(op);
    delete op;
  }

  void WatchCqFd() {
    if (epoll_cq_fd_ >= 0) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, epoll_cq_fd_, nullptr);
    epoll_cq_fd_ = fi_.wait_fd();
    if (epoll_cq_fd_ < 0) return;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, epoll_cq_fd_, &ev);
  }

  Status PostRecv(size_t i) {
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
  Status PostReceives() {
    for (size_t i = 0; i < kNumRecv; ++i) TANDEM_RETURN_IF_ERROR(PostRecv(i));
    return Status::Ok();
  }

  bool EnsureInserted(Link& link) {
    if (link.generation == generation_) return true;
    fi_addr_t addr = FI_ADDR_UNSPEC;
    int rc = fi_av_insert(fi_.av(), link.address.data(), 1, &addr, 0, nullptr);
    if (rc != 1) return false;
    link.addr = addr;
    link.generation = generation_;
    return true;
  }

  // Once no operation to a broken or released address is in flight, it leaves the AV (tcp;ofi_rxm
  // keeps a broken connection per address: the next insert makes a new one).
  void MaybeReset(Link& link) {
    if (link.outstanding > 0 || !(link.broken || link.released)) return;
    if (link.generation == generation_) fi_av_remove(fi_.av(), &link.addr, 1, 0);
    link.generation = 0;
    link.broken = false;
  }

  void LinkFailed(const std::shared_ptr<Link>& link, const Status& why) {
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

  Status Send(const std::shared_ptr<Link>& link, std::string bytes) {
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

  std::string DescribeLink(const Link& link) const { return link.peer ? link.peer->name : "an initiator"; }

  // Posts the queued control messages it can, in order per address; an address whose send answers
  // -FI_EAGAIN (its connection is busy, or its peer stopped) waits without blocking the others.
  void FlushSends() {
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

  std::shared_ptr<Link> LinkOf(rma::Peer& peer) {
    if (!peer.conn) {
      auto conn = std::make_unique<FiConn>();
      conn->link = std::make_shared<Link>();
      conn->link->address = peer.address;
      conn->link->peer = &peer;
      peer.conn = std::move(conn);
    }
    return static_cast<FiConn*>(peer.conn.get())->link;
  }

  void* LocalDesc(uint64_t addr, uint64_t len) const {
    if (!(fi_.mr_mode() & FI_MR_LOCAL)) return nullptr;
    for (const auto& [id, m] : mrs_) {
      if (addr >= m.addr && addr + len <= m.addr + m.len) return fi_mr_desc(m.mr);
    }
    return nullptr;
  }

  // Issues what it can of transfer `id`; completes it when nothing is left in flight.
  void Issue(uint64_t id) {
    auto it = data_.find(id);
    if (it == data_.end()) return;
    DataState& ds = it->second;
    while (!ds.issued_all && ds.error.ok()) {
      if (ds.seg == ds.segments->size()) {
        ds.issued_all = true;
        break;
      }
      const Segment& s = (*ds.segments)[ds.seg];
      uint64_t len = std::min({s.len - ds.off, kMaxOpBytes, fi_.max_msg_size()});
      uint64_t remote = s.remote_addr + ds.off;
      ds.hint = rma::FindSpan(ds.peer->regions, s.remote_addr, s.len, ds.hint);
      auto key = ds.hint < 0 ? Result<std::pair<uint64_t, uint64_t>>(Err(StatusCode::kInvalidArgument, "no key"))
                             : fabric::DecodeRegionKey(ds.peer->keys[ds.hint]);
      if (!key.ok()) {
        ds.error = Err(StatusCode::kInvalidArgument, "libfabric: remote range {:#x}+{}: {}", s.remote_addr, s.len,
                       key.status().message());
        break;
      }
      if (!(fi_.mr_mode() & FI_MR_VIRT_ADDR)) remote -= key->second;  // an offset into the region
      if (!EnsureInserted(*ds.link)) {
        ds.error = Err(StatusCode::kInternal, "libfabric: fi_av_insert of {} failed", ds.peer->name);
        break;
      }
      void* local = reinterpret_cast<void*>(s.local_addr + ds.off);
      void* desc = LocalDesc(s.local_addr, s.len);
      OpCtx* op = NewOp(OpCtx::kData);
      op->xfer_id = id;
      op->link = ds.link;
      ssize_t rc = ds.op == Op::kWrite
                       ? fi_write(fi_.ep(), local, len, desc, ds.link->addr, remote, key->first, &op->ctx)
                       : fi_read(fi_.ep(), local, len, desc, ds.link->addr, remote, key->first, &op->ctx);
      if (rc != 0) {
        DropOp(op);
        if (rc == -FI_EAGAIN) return;  // the CQ must move first; Progress comes back
        ds.error = FiError(ds.op == Op::kWrite ? "fi_write" : "fi_read", rc);
        break;
      }
      ds.outstanding++;
      ds.link->outstanding++;
      ds.off += len;
      if (ds.off == s.len) {
        ds.seg++;
        ds.off = 0;
      }
    }
    ds.issued_all = true;
    std::erase(issuing_, id);
    CheckDone(id);
  }

  void CheckDone(uint64_t id) {
    auto it = data_.find(id);
    if (it == data_.end() || !it->second.issued_all || it->second.outstanding > 0) return;
    Status st = it->second.error;
    data_.erase(it);
    DataDone(id, st);
  }

  void OnCompletion(OpCtx* op, const Status& st, size_t len) {
    std::unique_ptr<OpCtx> own(op);
    ops_.erase(op);
    if (op->kind == OpCtx::kRecv) {
      if (!st.ok()) {  // only a closing endpoint cancels receives
        if (fi_.open()) repost_.push_back(op->buf);
        return;
      }
      std::string bytes(static_cast<const char*>(Buf(op->buf)), len);
      (void)PostRecv(op->buf);
      HandleControl(bytes, [this](const rma::ControlMessage& request, std::string out) {
        if (request.reply_address.empty()) return Err(StatusCode::kInternal, "libfabric: no reply address");
        auto& link = reply_links_[request.reply_address];
        if (!link) {
          link = std::make_shared<Link>();
          link->address = request.reply_address;
        }
        return Send(link, std::move(out));
      });
      return;
    }
    std::shared_ptr<Link> link = op->link;
    link->outstanding--;
    if (op->kind == OpCtx::kSend) {
      free_send_.push_back(op->buf);
    } else if (auto it = data_.find(op->xfer_id); it != data_.end()) {
      it->second.outstanding--;
      if (!st.ok() && it->second.error.ok()) it->second.error = st;
    }
    if (!st.ok()) {
      LinkFailed(link, st);
    } else {
      MaybeReset(*link);
    }
    if (op->kind == OpCtx::kData) CheckDone(op->xfer_id);
  }

  // Closes the endpoint (every operation in flight is dropped: its transfer fails) and opens it again.
  void Recover(const Status& why) {
    fi_.CloseEndpoint();  // no operation touches memory after this
    generation_++;
    for (OpCtx* op : ops_) {
      if (op->link) op->link->outstanding--;
      if (op->kind == OpCtx::kSend) free_send_.push_back(op->buf);
      if (op->kind == OpCtx::kData) {
        auto it = data_.find(op->xfer_id);
        if (it != data_.end()) {
          it->second.outstanding--;
          if (it->second.error.ok()) it->second.error = why;
        }
      }
      delete op;
    }
    ops_.clear();
    repost_.clear();
    reply_links_.clear();
    for (auto& [id, ds] : data_) {
      if (!ds.issued_all && ds.error.ok()) ds.error = why;
    }
    if (!stopping_) {
      Status st = fi_.Reopen();
      if (st.ok()) st = PostReceives();
      if (!st.ok()) log::error("libfabric backend of {}: endpoint lost: {}", host().agent_name(), st.ToString());
      WatchCqFd();
    }
    std::vector<uint64_t> ids;
    for (auto& [id, ds] : data_) ids.push_back(id);
    for (uint64_t id : ids) Issue(id);  // ends them: their error is set
  }

  // ---- the base's hooks
  Result<std::string> RegisterLocal(const RegionInfo& region) override {
    if (!fi_.domain()) return Err(StatusCode::kFailedPrecondition, "libfabric backend is shut down");
    LocalMr m{region.addr, region.len, nullptr};
    uint64_t requested = next_key_++;
    int rc = fi_mr_reg(fi_.domain(), reinterpret_cast<void*>(region.addr), region.len,
                       FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, requested, 0, &m.mr, nullptr);
    if (rc) return FiError("fi_mr_reg", rc);
    uint64_t key = (fi_.mr_mode() & FI_MR_PROV_KEY) ? fi_mr_key(m.mr) : requested;
    mrs_[region.id] = m;
    return fabric::EncodeRegionKey(key, region.addr);
  }

  void DeregisterLocal(const RegionInfo& region) override {
    auto it = mrs_.find(region.id);
    if (it == mrs_.end()) return;
    fi_close(&it->second.mr->fid);
    mrs_.erase(it);
  }

  Result<std::string> ParseAddress(const std::string& info) const override {
    TANDEM_ASSIGN_OR_RETURN(fabric::PeerAddress a, fabric::DecodeConnectionInfo(info));
    if (a.provider != fi_.provider() || a.addr_format != fi_.addr_format()) {
      return Err(StatusCode::kFailedPrecondition, "libfabric: the peer uses provider {} (address format {}), we {} ({})",
                 a.provider, a.addr_format, fi_.provider(), fi_.addr_format());
    }
    return a.address;
  }

  std::string ReplyAddress() const override { return fi_.address(); }

  Status SendControl(rma::Peer& peer, std::string bytes) override { return Send(LinkOf(peer), std::move(bytes)); }

  bool Connected(const rma::Peer& peer) const override {
    auto* conn = static_cast<const FiConn*>(peer.conn.get());
    return conn && !conn->link->broken && fi_.open();
  }

  void StartData(rma::Peer& peer, rma::Xfer& x) override {
    uint64_t id = x.req->id;
    DataState& ds = data_[id];
    ds.link = LinkOf(peer);
    ds.peer = &peer;
    ds.segments = &x.req->segments;
    ds.op = x.req->op;
    if (ds.link->broken || !fi_.open()) {
      ds.error = Err(StatusCode::kInternal, "libfabric: the connection to {} broke", peer.name);
    }
    issuing_.push_back(id);
    Issue(id);
  }

  void AbortPeer(rma::Peer& peer, const Status& why) override { Recover(why); }

  // With nothing in flight to the peer nothing would report its death: a kPing does (its send fails
  // once the connection broke).
  void KeepAlive(rma::Peer& peer) override {
    auto link = LinkOf(peer);
    if (link->broken || link->outstanding > 0 || !fi_.open()) return;
    rma::ControlMessage ping;
    ping.type = rma::ControlType::kPing;
    ping.initiator = host().agent_name();
    ping.initiator_instance = host().instance_id();
    ping.reply_address = fi_.address();
    (void)Send(link, rma::EncodeControl(ping));
  }

  void ReleasePeer(rma::Peer& peer) override {
    auto* conn = static_cast<FiConn*>(peer.conn.get());
    if (!conn) return;
    conn->link->peer = nullptr;
    conn->link->released = true;
    if (fi_.open()) MaybeReset(*conn->link);
    peer.conn.reset();
  }

  int Progress() override {
    if (!fi_.open()) return 0;
    int n = 0;
    for (int round = 0; round < 16; ++round) {
      fi_cq_msg_entry entries[kCqBatch];
      ssize_t k = fi_cq_read(fi_.cq(), entries, kCqBatch);
      if (k > 0) {
        for (ssize_t i = 0; i < k; ++i) {
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
    return n;
  }

  void WaitEvents(int timeout_ms) override {
    if (!pending_sends_.empty() || !issuing_.empty() || !repost_.empty()) timeout_ms = std::min(timeout_ms, 1);
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

  void Wake() override {
    uint64_t one = 1;
    if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof(one));
  }

  void StopTransport() override {
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

  const FiParams params_;
  fabric::FiEndpoint fi_;
  bool stopping_ = false;
  uint64_t generation_ = 1;  // of the AV: Recover opens a new one
  uint64_t next_key_ = 1;    // requested keys (without FI_MR_PROV_KEY): unique in the domain
  std::vector<char> slab_;   // control buffers: kNumRecv receive, then kNumSend send
  fid_mr* slab_mr_ = nullptr;
  std::vector<size_t> free_send_;
  std::vector<size_t> repost_;
  std::deque<std::pair<std::shared_ptr<Link>, std::string>> pending_sends_;
  std::map<std::string, std::shared_ptr<Link>> reply_links_;  // initiators' addresses
  std::set<OpCtx*> ops_;                                       // in flight
  std::map<uint64_t, DataState> data_;                         // by transfer id
  std::vector<uint64_t> issuing_;                              // transfers with operations left to issue
  std::map<uint64_t, LocalMr> mrs_;                            // by region id
  int wake_fd_ = -1, epoll_fd_ = -1, epoll_cq_fd_ = -1;
};

}  // namespace

Result<std::unique_ptr<Backend>> MakeLibfabricBackend(BackendHost& host, const BackendParams& params) {
  TANDEM_ASSIGN_OR_RETURN(FiParams p, ParseParams(params));
  BackendCapabilities caps;
  caps.host_memory = true;
  caps.same_process = caps.same_node = caps.remote = true;
  caps.priority = p.priority;
  auto backend = std::make_unique<LibfabricBackend>(host, std::move(p), caps);
  TANDEM_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace tandem::transfer
