#include "transfer/fabric_rma.h"

#include <algorithm>
#include <future>

#include "common/logging.h"

namespace tandem::transfer::rma {

using Clock = std::chrono::steady_clock;

namespace {
constexpr auto kTick = std::chrono::milliseconds(10);
constexpr auto kKeepAlive = std::chrono::milliseconds(200);
constexpr auto kStopDrain = std::chrono::seconds(2);  // at shutdown: how long cancelled data may take
}  // namespace

RmaBackend::RmaBackend(BackendHost& host, std::string name, BackendCapabilities caps)
    : host_(host), name_(std::move(name)), caps_(caps), guards_(host) {}

RmaBackend::~RmaBackend() {
  // The transport's destructor must have called Shutdown() (its hooks are gone by now).
  if (thread_.joinable()) thread_.join();
}

void RmaBackend::StartProgressThread() {
  last_tick_ = Clock::now();
  thread_ = std::thread([this] { Loop(); });
}

void RmaBackend::Submit(std::function<void()> fn) {
  std::lock_guard lock(mu_);
  commands_.push_back(std::move(fn));
  WakeLocked();
}

void RmaBackend::WakeLocked() {
  // Once the thread saw stop_ it goes on to StopTransport, which closes what Wake writes to: a
  // Wake from another thread then could write to a closed (or reused) descriptor. Shutdown's
  // Wake comes under the lock that sets stop_, so the thread is woken before it can see it.
  if (!stop_) Wake();
}

template <typename T>
T RmaBackend::RunSync(std::function<T()> fn) {
  bool inline_call = on_progress_thread() || thread_done_.load() || !thread_.joinable();
  if (inline_call) return fn();
  auto task = std::make_shared<std::packaged_task<T()>>(std::move(fn));
  std::future<T> result = task->get_future();
  {
    std::lock_guard lock(mu_);
    if (!stop_) {
      commands_.push_back([task] { (*task)(); });
      task.reset();
      WakeLocked();
    }
  }
  if (task) {  // stopping: the thread may be gone before it runs commands; wait for it, then run here
    if (thread_.joinable() && !on_progress_thread()) {
      while (!thread_done_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    (*task)();
    return result.get();
  }
  return result.get();
}

Result<std::string> RmaBackend::OnRegister(const RegionInfo& region) {
  if (region.kind != MemoryKind::kHost) {
    return Err(StatusCode::kInvalidArgument, "the {} backend registers host memory only", name_);
  }
  return RunSync<Result<std::string>>([&] { return RegisterLocal(region); });
}

void RmaBackend::OnDeregister(const RegionInfo& region) {
  if (region.kind != MemoryKind::kHost || region.id == 0) return;
  RunSync<int>([&] {
    DeregisterLocal(region);
    return 0;
  });
}

Status RmaBackend::LoadPeer(const AgentMetadata& md) {
  auto peer = std::make_shared<Peer>();
  peer->name = md.name;
  peer->instance_id = md.instance_id;
  auto it = md.backends.find(name_);
  if (it == md.backends.end()) return Err(StatusCode::kNotFound, "peer {} has no {} backend", md.name, name_);
  TANDEM_ASSIGN_OR_RETURN(peer->address, ParseAddress(it->second));
  for (const RegionMetadata& r : md.regions) {
    auto key = r.backend_info.find(name_);
    if (r.kind != MemoryKind::kHost || key == r.backend_info.end()) continue;
    peer->regions.push_back({r.addr, r.len});
    peer->keys.push_back(key->second);
  }
  {
    std::lock_guard lock(mu_);
    if (stop_) return Err(StatusCode::kFailedPrecondition, "{} backend is shut down", name_);
    known_.insert(md.name);
  }
  Submit([this, peer] { ApplyPeer(peer); });
  return Status::Ok();
}

void RmaBackend::ApplyPeer(std::shared_ptr<Peer> peer) {
  auto it = peers_.find(peer->name);
  if (it != peers_.end()) {
    Peer& old = *it->second;
    if (old.instance_id == peer->instance_id && old.address == peer->address) {
      old.regions = std::move(peer->regions);  // the same instance re-exported: keep the connection
      old.keys = std::move(peer->keys);
      return;
    }
    Retire(it->second, Err(StatusCode::kFailedPrecondition, "peer {} metadata replaced", peer->name));
  }
  peers_[peer->name] = std::move(peer);
}

void RmaBackend::InvalidatePeer(const std::string& peer_name) {
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    known_.erase(peer_name);
  }
  Submit([this, peer_name] {
    auto it = peers_.find(peer_name);
    if (it == peers_.end()) return;
    auto peer = it->second;
    peers_.erase(it);
    Retire(peer, Err(StatusCode::kFailedPrecondition, "peer {} invalidated", peer_name));
  });
}

void RmaBackend::Retire(const std::shared_ptr<Peer>& peer, const Status& why) {
  peer->retired = true;
  bool data = false;
  for (const auto& [id, x] : xfers_) data |= x.peer == peer && x.data_pending;
  if (data) {
    Abort(peer, why);  // DataDone may come at once (and release the peer)
  } else {
    PeerBroken(*peer, why);
  }
  if (peer->active == 0) {
    ReleasePeer(*peer);  // idempotent
  } else if (std::find(retired_.begin(), retired_.end(), peer) == retired_.end()) {
    retired_.push_back(peer);
  }
}

void RmaBackend::PeerBroken(Peer& peer, const Status& why) {
  std::vector<uint64_t> fail;
  for (auto& [id, x] : xfers_) {
    if (x.peer.get() != &peer) continue;
    if (x.data_pending) {
      if (x.error.ok()) x.error = why;
      if (x.pushed) abort_.insert(x.peer);  // the peer may still be writing: cut it first (Tick)
    } else {
      fail.push_back(id);
    }
  }
  for (uint64_t id : fail) Finish(id, why);
}

Status RmaBackend::Post(std::shared_ptr<TransferRequest> req) {
  if (req->local_kind != MemoryKind::kHost || req->remote_kind != MemoryKind::kHost) {
    return Err(StatusCode::kInvalidArgument, "the {} backend moves host memory only", name_);
  }
  if (req->notification && req->notification->size() > kMaxNotificationBytes) {
    return Err(StatusCode::kInvalidArgument, "{} backend: a notification of {} bytes (at most {})", name_,
               req->notification->size(), kMaxNotificationBytes);
  }
  {
    std::lock_guard lock(mu_);
    if (stop_) return Err(StatusCode::kFailedPrecondition, "{} backend is shut down", name_);
    if (!known_.count(req->peer)) return Err(StatusCode::kNotFound, "{} backend does not know peer {}", name_, req->peer);
    commands_.push_back([this, req] { StartXfer(req); });
    WakeLocked();
  }
  return Status::Ok();
}

void RmaBackend::StartXfer(std::shared_ptr<TransferRequest> req) {
  auto it = peers_.find(req->peer);
  if (it == peers_.end()) {
    req->Complete(Err(StatusCode::kNotFound, "{} backend does not know peer {}", name_, req->peer));
    return;
  }
  std::shared_ptr<Peer> peer = it->second;
  auto bounds = BoundsOf(req->segments, peer->regions);
  if (!bounds.ok()) {
    req->Complete(bounds.status());
    return;
  }
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(req->deadline - Clock::now()).count();
  ControlMessage begin;
  begin.type = ControlType::kBegin;
  begin.xfer_id = req->id;
  begin.initiator = host_.agent_name();
  begin.initiator_instance = host_.instance_id();
  begin.reply_address = ReplyAddress();
  begin.target_instance = peer->instance_id;
  begin.op = req->op;
  begin.timeout_ms = static_cast<uint32_t>(std::clamp<int64_t>(left, 1, int64_t{1} << 31));
  begin.bounds = std::move(*bounds);
  const bool push = req->op == Op::kRead && PushesReads();
  if (push) {
    begin.flags |= kPush;
    std::map<std::string, uint32_t> index;
    for (const Segment& s : req->segments) {
      auto key = LocalKey(s.local_addr, s.len);
      if (!key.ok()) {
        req->Complete(key.status());
        return;
      }
      auto [it, fresh] = index.try_emplace(*key, static_cast<uint32_t>(begin.keys.size()));
      if (fresh) begin.keys.push_back(*key);
      begin.push.push_back({s.remote_addr, s.local_addr, s.len, it->second});
    }
  }
  uint64_t id = req->id;
  Xfer& x = xfers_[id];
  x.req = std::move(req);
  x.peer = peer;
  x.pushed = x.data_pending = push;
  peer->active++;
  Status st = SendControl(*peer, EncodeControl(begin));
  if (!st.ok()) Finish(id, st);
}

void RmaBackend::HandleControl(std::string_view bytes, const ReplyFn& reply) {
  auto m = DecodeControl(bytes);
  if (!m.ok()) {
    log::warn("{} backend of agent {}: dropped a control message: {}", name_, host_.agent_name(),
              m.status().ToString());
    return;
  }
  switch (m->type) {
    case ControlType::kBegin: {
      Status st = m->target_instance != host_.instance_id()
                      ? Err(StatusCode::kFailedPrecondition, "agent {} is instance {}, not {}", host_.agent_name(),
                            host_.instance_id(), m->target_instance)
                      : guards_.Begin(*m, Clock::now());
      if (st.ok() && (m->flags & kPush)) {
        StartPush(*m);  // answers kGrant once the data landed
        break;
      }
      Status sent = reply(*m, EncodeControl(ReplyTo(*m, ControlType::kGrant, st)));
      if (!sent.ok()) guards_.End(*m);
      break;
    }
    case ControlType::kEnd: {
      bool pinned = guards_.End(*m);
      if (pinned && m->status.ok() && m->notification) {
        host_.DeliverNotification({m->initiator, *m->notification});
      }
      if (m->flags & kWantAck) {
        Status st = pinned ? Status::Ok()
                           : Err(StatusCode::kInternal, "agent {}: the transfer's guard expired before its end",
                                 host_.agent_name());
        (void)reply(*m, EncodeControl(ReplyTo(*m, ControlType::kAck, st)));
      }
      break;
    }
    case ControlType::kGrant: OnGrant(*m); break;
    case ControlType::kAck: OnAck(*m); break;
    case ControlType::kPing: break;
  }
}

void RmaBackend::OnGrant(const ControlMessage& m) {
  auto it = xfers_.find(m.xfer_id);
  if (it == xfers_.end() || it->second.phase != Phase::kAwaitGrant) return;
  Xfer& x = it->second;
  if (x.pushed) {  // the target pushed the data: it landed, or the error says why not
    if (!x.data_pending) return;
    x.data_pending = false;
    x.phase = Phase::kData;
    AfterData(m.xfer_id, m.status.ok() ? Status::Ok()
                                       : Status(m.status.code(), fmt::format("peer {}: {}", x.peer->name,
                                                                             m.status.message())));
    return;
  }
  if (!m.status.ok()) {
    Finish(m.xfer_id, Status(m.status.code(), fmt::format("peer {}: {}", x.peer->name, m.status.message())));
    return;
  }
  x.phase = Phase::kData;
  x.data_pending = true;
  StartData(*x.peer, x);  // may complete (and erase x) at once
}

void RmaBackend::DataDone(uint64_t xfer_id, Status status) {
  auto it = xfers_.find(xfer_id);
  if (it == xfers_.end() || !it->second.data_pending || it->second.pushed) return;
  it->second.data_pending = false;
  AfterData(xfer_id, std::move(status));
}

void RmaBackend::AfterData(uint64_t xfer_id, Status status) {
  auto it = xfers_.find(xfer_id);
  if (it == xfers_.end()) return;
  Xfer& x = it->second;
  Status err = !x.error.ok() ? x.error : status;
  if (!err.ok()) {
    if (Connected(*x.peer)) SendEnd(x, err, false);  // release the target's pin
    Finish(xfer_id, err);
    return;
  }
  if (x.req->notification) {
    x.phase = Phase::kAwaitAck;
    SendEnd(x, Status::Ok(), true);
    return;
  }
  SendEnd(x, Status::Ok(), false);
  Finish(xfer_id, Status::Ok());
}

void RmaBackend::SendEnd(Xfer& x, const Status& status, bool want_ack) {
  ControlMessage end;
  end.type = ControlType::kEnd;
  end.flags = want_ack ? kWantAck : 0;
  end.xfer_id = x.req->id;
  end.status = status;
  end.initiator = host_.agent_name();
  end.initiator_instance = host_.instance_id();
  end.reply_address = ReplyAddress();
  end.target_instance = x.peer->instance_id;
  end.op = x.req->op;
  if (status.ok()) end.notification = x.req->notification;
  uint64_t id = x.req->id;
  Status st = SendControl(*x.peer, EncodeControl(end));
  if (!st.ok() && want_ack) Finish(id, st);
}

void RmaBackend::OnAck(const ControlMessage& m) {
  auto it = xfers_.find(m.xfer_id);
  if (it == xfers_.end() || it->second.phase != Phase::kAwaitAck) return;
  Status st = m.status.ok() ? Status::Ok()
                            : Status(m.status.code(), fmt::format("peer {}: {}", it->second.peer->name,
                                                                  m.status.message()));
  Finish(m.xfer_id, st);
}

void RmaBackend::Finish(uint64_t xfer_id, Status status) {
  auto it = xfers_.find(xfer_id);
  if (it == xfers_.end()) return;
  std::shared_ptr<TransferRequest> req = std::move(it->second.req);
  std::shared_ptr<Peer> peer = std::move(it->second.peer);
  xfers_.erase(it);
  if (--peer->active == 0 && peer->retired) {
    ReleasePeer(*peer);
    std::erase(retired_, peer);
  }
  req->Complete(std::move(status));
}

void RmaBackend::Abort(const std::shared_ptr<Peer>& peer, const Status& why) {
  PeerBroken(*peer, why);
  AbortPeer(*peer, why);
  // Pushed READs: after AbortPeer nothing the peer sends lands here any more.
  std::vector<std::pair<uint64_t, Status>> done;
  for (auto& [id, x] : xfers_) {
    if (x.peer == peer && x.pushed && x.data_pending) done.emplace_back(id, x.error.ok() ? why : x.error);
  }
  for (auto& [id, st] : done) Finish(id, st);
  abort_.erase(peer);
}

void RmaBackend::Tick() {
  while (!abort_.empty()) {
    std::shared_ptr<Peer> peer = *abort_.begin();
    Abort(peer, Err(StatusCode::kInternal, "connection to {} aborted: it broke", peer->name));
  }
  auto now = Clock::now();
  if (now - last_tick_ < kTick) return;
  last_tick_ = now;
  guards_.Expire(now);
  std::vector<uint64_t> late;
  std::set<std::shared_ptr<Peer>> abort;
  for (auto& [id, x] : xfers_) {
    if (now <= x.req->deadline) continue;
    Status t = Err(StatusCode::kInternal, "{} transfer {} to {} timed out", name_, id, x.peer->name);
    if (x.data_pending) {
      if (x.error.ok()) x.error = t;
      abort.insert(x.peer);
    } else {
      late.push_back(id);
    }
  }
  for (uint64_t id : late) {
    auto it = xfers_.find(id);
    Finish(id, Err(StatusCode::kInternal, "{} transfer {} to {} timed out", name_, id, it->second.peer->name));
  }
  for (const auto& peer : abort) {
    Abort(peer, Err(StatusCode::kInternal, "connection to {} aborted: a transfer timed out", peer->name));
  }
  if (now - last_keepalive_ >= kKeepAlive) {
    last_keepalive_ = now;
    std::set<std::shared_ptr<Peer>> waiting;
    for (auto& [id, x] : xfers_) {
      if (!x.data_pending || x.pushed) waiting.insert(x.peer);  // a push moves no data of ours
    }
    for (const auto& peer : waiting) KeepAlive(*peer);
  }
}

void RmaBackend::Loop() {
  for (;;) {
    std::deque<std::function<void()>> commands;
    bool stop;
    {
      std::lock_guard lock(mu_);
      commands.swap(commands_);
      stop = stop_;
    }
    for (auto& c : commands) c();
    if (stop) break;
    int events = Progress();
    Tick();
    if (events == 0 && commands.empty()) WaitEvents(xfers_.empty() && guards_.size() == 0 ? 100 : 5);
  }
  StopOnThread();
  thread_done_ = true;
}

void RmaBackend::StopOnThread() {
  Status why = Err(StatusCode::kFailedPrecondition, "{} backend of agent {} shutting down", name_, host_.agent_name());
  std::vector<std::shared_ptr<Peer>> all = retired_;
  for (auto& [name, p] : peers_) all.push_back(p);
  for (auto& p : all) {
    bool data = false;
    for (const auto& [id, x] : xfers_) data |= x.peer == p && x.data_pending;
    if (data) {
      Abort(p, why);
    } else {
      PeerBroken(*p, why);
    }
  }
  for (auto until = Clock::now() + kStopDrain; !xfers_.empty() && Clock::now() < until;) {
    if (Progress() == 0) WaitEvents(1);
  }
  for (auto& p : all) ReleasePeer(*p);
  StopTransport();  // nothing touches memory after this
  while (!xfers_.empty()) Finish(xfers_.begin()->first, why);
  guards_.Clear();
  peers_.clear();
  retired_.clear();
}

void RmaBackend::Shutdown() {
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    WakeLocked();  // while stop_ is still false; the thread sees it only after this lock
    stop_ = true;
    known_.clear();
  }
  if (thread_.joinable()) thread_.join();
  // Commands that arrived after the thread stopped: run them here (they fail or no-op).
  std::deque<std::function<void()>> rest;
  {
    std::lock_guard lock(mu_);
    rest.swap(commands_);
  }
  for (auto& c : rest) c();
}

}  // namespace tandem::transfer::rma
