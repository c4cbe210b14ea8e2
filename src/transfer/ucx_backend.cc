#include "transfer/ucx_backend.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include <ucp/api/ucp.h>

#include "common/logging.h"
#include "transfer/fabric_rma.h"
#include "transfer/ucx_loader.h"

namespace tandem::transfer {

namespace {

constexpr std::string_view kPrefix = "ucx1";  // connection info and region blobs, version 1
constexpr unsigned kAmId = 0x7a;

Status UcsError(std::string_view what, ucs_status_t s, StatusCode code = StatusCode::kInternal) {
  return Err(code, "ucx: {}: {}", what, ucs_status_string(s));
}

struct UcxParams {
  std::string host = "127.0.0.1";
  std::string tls;
  std::string net_devices;
  int priority = 8;
};

Result<UcxParams> ParseParams(const BackendParams& params) {
  UcxParams p;
  for (const auto& [key, value] : params) {
    if (key == "host") {
      p.host = value;
    } else if (key == "tls") {
      p.tls = value;
    } else if (key == "net_devices") {
      p.net_devices = value;
    } else if (key == "priority") {
      try {
        p.priority = std::stoi(value);
      } catch (const std::exception&) {
        return Err(StatusCode::kInvalidArgument, "ucx backend: bad priority '{}'", value);
      }
    } else {
      return Err(StatusCode::kInvalidArgument, "ucx backend: unknown parameter '{}'", key);
    }
  }
  return p;
}

bool IsLoopback(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "::1" || host == "localhost";
}

class UcxBackend;

struct UcxConn : rma::PeerConn {
  UcxBackend* self = nullptr;
  ucp_ep_h ep = nullptr;
  bool failed = false;
  rma::Peer* peer = nullptr;                // the owner
  std::map<std::string, ucp_rkey_h> rkeys;  // by packed key
};

// What UCX callbacks leave for the progress loop: callbacks never call into the base.
struct Event {
  enum Type { kFlushDone, kEpError, kControl } type = kControl;
  uint64_t xfer_id = 0;
  ucs_status_t status = UCS_OK;
  UcxConn* conn = nullptr;
  std::string bytes;
  ucp_ep_h reply_ep = nullptr;
};

struct FlushContext {
  UcxBackend* self;
  uint64_t xfer_id;
};

class UcxBackend final : public rma::RmaBackend {
 public:
  UcxBackend(BackendHost& host, UcxParams p, BackendCapabilities caps)
      : RmaBackend(host, "ucx", caps), params_(std::move(p)) {}
  ~UcxBackend() override {
    Shutdown();
    StopTransport();  // when the thread never started
  }

  Status Init() {
    ucp_config_t* config = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
    if (s != UCS_OK) return UcsError("ucp_config_read", s);
    bool loopback = IsLoopback(params_.host);
    std::string tls = !params_.tls.empty() ? params_.tls : (loopback && !std::getenv("UCX_TLS") ? "tcp" : "");
    std::string devices = !params_.net_devices.empty()
                              ? params_.net_devices
                              : (loopback && !std::getenv("UCX_NET_DEVICES") ? "lo" : "");
    if (!tls.empty()) s = ucp_config_modify(config, "TLS", tls.c_str());
    if (s == UCS_OK && !devices.empty()) s = ucp_config_modify(config, "NET_DEVICES", devices.c_str());
    // UCX's tcp transport emulates RMA with active-message fragments of UCX_TCP_{TX,RX}_SEG_SIZE
    // (default 8 KiB): 512 KiB moves ~4x the bytes per second on loopback here (transfer_bench).
    // Unless the environment sets them; the keys go without the TCP_ prefix (UCP hands unknown
    // keys to the transports' own tables).
    for (const char* key : {"TX_SEG_SIZE", "RX_SEG_SIZE"}) {
      if (s == UCS_OK && !std::getenv(fmt::format("UCX_TCP_{}", key).c_str())) s = ucp_config_modify(config, key, "512k");
    }
    if (s != UCS_OK) {
      ucp_config_release(config);
      return UcsError(fmt::format("ucp_config_modify (TLS={}, NET_DEVICES={})", tls, devices), s,
                      StatusCode::kInvalidArgument);
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    s = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (s != UCS_OK) {
      context_ = nullptr;
      return UcsError(fmt::format("ucp_init (TLS={}, NET_DEVICES={})", tls.empty() ? "default" : tls,
                                  devices.empty() ? "default" : devices),
                      s, StatusCode::kFailedPrecondition);
    }
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // only the progress thread calls in
    if ((s = ucp_worker_create(context_, &wp, &worker_)) != UCS_OK) {
      worker_ = nullptr;
      return UcsError("ucp_worker_create", s, StatusCode::kFailedPrecondition);
    }
    ucp_am_handler_param_t am{};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    am.id = kAmId;
    am.flags = UCP_AM_FLAG_WHOLE_MSG;
    am.cb = &UcxBackend::OnAm;
    am.arg = this;
    if ((s = ucp_worker_set_am_recv_handler(worker_, &am)) != UCS_OK) return UcsError("set_am_recv_handler", s);
    ucp_address_t* address = nullptr;
    size_t length = 0;
    if ((s = ucp_worker_get_address(worker_, &address, &length)) != UCS_OK) return UcsError("get_address", s);
    connection_info_ = std::string(kPrefix) + std::string(reinterpret_cast<const char*>(address), length);
    ucp_worker_release_address(worker_, address);

    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (wake_fd_ < 0 || epoll_fd_ < 0) return Err(StatusCode::kInternal, "ucx backend: eventfd/epoll failed");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
    int efd = -1;
    if (ucp_worker_get_efd(worker_, &efd) == UCS_OK) {
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, efd, &ev);
      can_arm_ = true;
    }
    log::debug("ucx backend of {}: TLS={} NET_DEVICES={}, worker address {} bytes, wakeup {}", host().agent_name(),
               tls.empty() ? "default" : tls, devices.empty() ? "default" : devices, length, can_arm_);
    StartProgressThread();
    return Status::Ok();
  }

 private:
  // ---- UCX callbacks (inside ucp_worker_progress)
  static ucs_status_t OnAm(void* arg, const void* header, size_t header_length, void* data, size_t length,
                           const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxBackend*>(arg);
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
      log::warn("ucx backend of {}: dropped a rendezvous control message", self->host().agent_name());
      return UCS_OK;  // control messages are sent eager
    }
    Event e;
    e.type = Event::kControl;
    e.bytes.assign(static_cast<const char*>(data), length);
    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) e.reply_ep = param->reply_ep;
    self->events_.push_back(std::move(e));
    return UCS_OK;
  }
  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status) {
    auto* conn = static_cast<UcxConn*>(arg);
    conn->failed = true;
    Event e;
    e.type = Event::kEpError;
    e.conn = conn;
    e.status = status;
    conn->self->events_.push_back(std::move(e));
  }
  static void OnFlush(void* request, ucs_status_t status, void* user_data) {
    auto* ctx = static_cast<FlushContext*>(user_data);
    Event e;
    e.type = Event::kFlushDone;
    e.xfer_id = ctx->xfer_id;
    e.status = status;
    ctx->self->events_.push_back(std::move(e));
    delete ctx;
    ucp_request_free(request);
  }
  static void OnSent(void* request, ucs_status_t status, void* user_data) {
    delete static_cast<std::string*>(user_data);
    ucp_request_free(request);
  }

  // ---- helpers
  Result<UcxConn*> Connect(rma::Peer& peer) {
    auto* conn = static_cast<UcxConn*>(peer.conn.get());
    if (conn && !conn->failed) return conn;
    if (conn) CloseConn(peer, true);
    auto fresh = std::make_unique<UcxConn>();
    fresh->self = this;
    fresh->peer = &peer;
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(peer.address.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxBackend::OnEpError;
    ep.err_handler.arg = fresh.get();
    ucs_status_t s = ucp_ep_create(worker_, &ep, &fresh->ep);
    if (s != UCS_OK) return UcsError(fmt::format("endpoint to {}", peer.name), s);
    conn = fresh.get();
    live_.insert(conn);
    peer.conn = std::move(fresh);
    return conn;
  }

  // Closes the peer's endpoint: `force` cancels its requests (UCS_ERR_CANCELED), otherwise they are
  // flushed first. The close completes in the background (closing_).
  void CloseConn(rma::Peer& peer, bool force) {
    std::unique_ptr<rma::PeerConn> base = std::move(peer.conn);
    auto* conn = static_cast<UcxConn*>(base.get());
    if (!conn) return;
    live_.erase(conn);
    conn->peer = nullptr;
    if (!force) DestroyRkeys(*conn);  // nothing in flight uses them
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t req = ucp_ep_close_nbx(conn->ep, &p);
    if (force) DestroyRkeys(*conn);  // the requests that used them are cancelled
    conn->ep = nullptr;
    if (req != nullptr && !UCS_PTR_IS_ERR(req)) {
      closing_.emplace_back(req, std::move(base));
    }
  }

  void DestroyRkeys(UcxConn& conn) {
    for (auto& [blob, rkey] : conn.rkeys) ucp_rkey_destroy(rkey);
    conn.rkeys.clear();
  }

  Status SendOn(ucp_ep_h ep, std::string bytes, bool want_reply_ep) {
    auto* buf = new std::string(std::move(bytes));
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    p.cb.send = &UcxBackend::OnSent;
    p.user_data = buf;
    p.flags = UCP_AM_SEND_FLAG_EAGER | (want_reply_ep ? UCP_AM_SEND_FLAG_REPLY : 0);
    ucs_status_ptr_t req = ucp_am_send_nbx(ep, kAmId, nullptr, 0, buf->data(), buf->size(), &p);
    if (req == nullptr) {
      delete buf;
      return Status::Ok();
    }
    if (UCS_PTR_IS_ERR(req)) {
      delete buf;
      return UcsError("am send", UCS_PTR_STATUS(req));
    }
    return Status::Ok();  // OnSent frees
  }

  Result<ucp_rkey_h> RkeyFor(UcxConn& conn, const std::string& blob) {
    auto it = conn.rkeys.find(blob);
    if (it != conn.rkeys.end()) return it->second;
    if (blob.size() <= kPrefix.size() || blob.compare(0, kPrefix.size(), kPrefix) != 0) {
      return Err(StatusCode::kFailedPrecondition, "ucx: a remote key of another format");
    }
    ucp_rkey_h rkey = nullptr;
    ucs_status_t s = ucp_ep_rkey_unpack(conn.ep, blob.data() + kPrefix.size(), &rkey);
    if (s != UCS_OK) return UcsError("ucp_ep_rkey_unpack", s);
    conn.rkeys.emplace(blob, rkey);
    return rkey;
  }

  // ---- the base's hooks
  Result<std::string> RegisterLocal(const RegionInfo& region) override {
    if (!context_) return Err(StatusCode::kFailedPrecondition, "ucx backend is shut down");
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = reinterpret_cast<void*>(region.addr);
    mp.length = region.len;
    ucp_mem_h memh = nullptr;
    ucs_status_t s = ucp_mem_map(context_, &mp, &memh);
    if (s != UCS_OK) return UcsError("ucp_mem_map", s);
    void* packed = nullptr;
    size_t size = 0;
    s = ucp_rkey_pack(context_, memh, &packed, &size);
    if (s != UCS_OK) {
      ucp_mem_unmap(context_, memh);
      return UcsError("ucp_rkey_pack", s);
    }
    std::string blob = std::string(kPrefix) + std::string(static_cast<const char*>(packed), size);
    ucp_rkey_buffer_release(packed);
    memh_[region.id] = memh;
    return blob;
  }

  void DeregisterLocal(const RegionInfo& region) override {
    auto it = memh_.find(region.id);
    if (it == memh_.end()) return;
    if (context_) ucp_mem_unmap(context_, it->second);
    memh_.erase(it);
  }

  Result<std::string> ParseAddress(const std::string& info) const override {
    if (info.size() <= kPrefix.size() || info.compare(0, kPrefix.size(), kPrefix) != 0) {
      return Err(StatusCode::kFailedPrecondition, "ucx: the peer's worker address has another format");
    }
    return info.substr(kPrefix.size());
  }

  std::string ReplyAddress() const override { return ""; }  // replies go to the reply endpoint

  Status SendControl(rma::Peer& peer, std::string bytes) override {
    TANDEM_ASSIGN_OR_RETURN(UcxConn * conn, Connect(peer));
    return SendOn(conn->ep, std::move(bytes), true);
  }

  bool Connected(const rma::Peer& peer) const override {
    auto* conn = static_cast<const UcxConn*>(peer.conn.get());
    return conn && !conn->failed;
  }

  void StartData(rma::Peer& peer, rma::Xfer& x) override {
    const uint64_t id = x.req->id;
    auto conn = Connect(peer);
    if (!conn.ok()) {
      DataDone(id, conn.status());
      return;
    }
    Status issued;
    int hint = -1;
    for (const Segment& seg : x.req->segments) {
      hint = rma::FindSpan(peer.regions, seg.remote_addr, seg.len, hint);
      if (hint < 0) {
        issued = Err(StatusCode::kInvalidArgument, "ucx: remote range {:#x}+{} has no key", seg.remote_addr, seg.len);
        break;
      }
      auto rkey = RkeyFor(**conn, peer.keys[hint]);
      if (!rkey.ok()) {
        issued = rkey.status();
        break;
      }
      ucp_request_param_t p{};
      void* local = reinterpret_cast<void*>(seg.local_addr);
      ucs_status_ptr_t req = x.req->op == Op::kWrite
                                 ? ucp_put_nbx((*conn)->ep, local, seg.len, seg.remote_addr, *rkey, &p)
                                 : ucp_get_nbx((*conn)->ep, local, seg.len, seg.remote_addr, *rkey, &p);
      if (UCS_PTR_IS_ERR(req)) {
        issued = UcsError(x.req->op == Op::kWrite ? "ucp_put_nbx" : "ucp_get_nbx", UCS_PTR_STATUS(req));
        break;
      }
      if (req != nullptr) ucp_request_free(req);  // it completes in the background; the flush waits for it
    }
    if (!issued.ok()) x.error = issued;
    // The flush completes once every operation above completed remotely (or was cancelled).
    auto* ctx = new FlushContext{this, id};
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &UcxBackend::OnFlush;
    p.user_data = ctx;
    ucs_status_ptr_t req = ucp_ep_flush_nbx((*conn)->ep, &p);
    if (req == nullptr || UCS_PTR_IS_ERR(req)) {
      delete ctx;
      DataDone(id, req == nullptr ? Status::Ok() : UcsError("flush", UCS_PTR_STATUS(req)));
    }
  }

  void AbortPeer(rma::Peer& peer, const Status& why) override { CloseConn(peer, true); }
  void ReleasePeer(rma::Peer& peer) override { CloseConn(peer, false); }

  int Progress() override {
    if (!worker_) return 0;
    int n = 0;
    for (int i = 0; i < 64; ++i) {  // bounded: commands get their turn
      unsigned k = ucp_worker_progress(worker_);
      if (k == 0) break;
      n += static_cast<int>(k);
    }
    std::vector<Event> events;
    events.swap(events_);
    for (Event& e : events) {
      n++;
      if (e.type == Event::kControl) {
        ucp_ep_h reply_ep = e.reply_ep;
        HandleControl(e.bytes, [&](const rma::ControlMessage&, std::string out) {
          if (!reply_ep) return Err(StatusCode::kInternal, "ucx: a control message without a reply endpoint");
          return SendOn(reply_ep, std::move(out), false);
        });
      } else if (e.type == Event::kFlushDone) {
        DataDone(e.xfer_id, e.status == UCS_OK ? Status::Ok() : UcsError("transfer", e.status));
      } else if (live_.count(e.conn) && e.conn->peer) {
        rma::Peer& peer = *e.conn->peer;
        PeerBroken(peer, UcsError(fmt::format("connection to {}", peer.name), e.status));
        CloseConn(peer, true);  // its flushes complete with an error
      }
    }
    std::erase_if(closing_, [](auto& c) {
      if (ucp_request_check_status(c.first) == UCS_INPROGRESS) return false;
      ucp_request_free(c.first);
      return true;
    });
    return n;
  }

  void WaitEvents(int timeout_ms) override {
    if (!events_.empty()) return;
    if (can_arm_) {
      ucs_status_t s = ucp_worker_arm(worker_);
      if (s == UCS_ERR_BUSY) return;  // events are waiting: progress again
      if (s != UCS_OK) timeout_ms = std::min(timeout_ms, 1);
    } else {
      timeout_ms = std::min(timeout_ms, 1);
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
    if (!worker_) {
      if (context_) ucp_cleanup(context_);
      context_ = nullptr;
      return;
    }
    // Closes still running (flush mode to a dead peer): give them a moment, then force.
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
         !closing_.empty() && std::chrono::steady_clock::now() < until;) {
      if (Progress() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (auto& c : closing_) ucp_request_cancel(worker_, c.first);
    while (ucp_worker_progress(worker_)) {
    }
    closing_.clear();  // the requests' memory goes with the worker
    for (auto& [id, memh] : memh_) ucp_mem_unmap(context_, memh);
    memh_.clear();
    ucp_worker_destroy(worker_);
    worker_ = nullptr;
    ucp_cleanup(context_);
    context_ = nullptr;
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    epoll_fd_ = wake_fd_ = -1;
    events_.clear();
  }

  const UcxParams params_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int wake_fd_ = -1, epoll_fd_ = -1;
  bool can_arm_ = false;
  std::map<uint64_t, ucp_mem_h> memh_;  // by region id
  std::set<UcxConn*> live_;
  std::vector<std::pair<ucs_status_ptr_t, std::unique_ptr<rma::PeerConn>>> closing_;
  std::vector<Event> events_;  // left by callbacks, handled by Progress
};

}  // namespace

Result<std::unique_ptr<Backend>> MakeUcxBackend(BackendHost& host, const BackendParams& params) {
  TANDEM_ASSIGN_OR_RETURN(UcxParams p, ParseParams(params));
  TANDEM_RETURN_IF_ERROR(LoadUcx());  // libucp is opened here, not at start (ucx_loader.h)
  BackendCapabilities caps;
  caps.host_memory = true;
  caps.same_process = caps.same_node = caps.remote = true;
  caps.priority = p.priority;
  auto backend = std::make_unique<UcxBackend>(host, std::move(p), caps);
  TANDEM_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace tandem::transfer
