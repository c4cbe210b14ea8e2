#include "transfer/tcp_client.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace tandem::transfer::tcp {

uint64_t NextWireId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

void StripeDone(const std::shared_ptr<Stripe>& stripe, const Status& status) {
  const std::shared_ptr<TcpTransfer>& t = stripe->parent;
  if (!status.ok()) {
    std::lock_guard lock(t->mu);
    if (t->error.ok()) t->error = status;
  }
  if (t->remaining.fetch_sub(1) != 1) return;
  Status error;
  {
    std::lock_guard lock(t->mu);
    error = t->error;
  }
  if (!error.ok()) {
    t->request->Complete(error);
    return;
  }
  if (stripe->type != FrameType::kNotify && t->notify_after && t->request->notification) {
    auto n = std::make_shared<Stripe>();
    n->parent = t;
    n->type = FrameType::kNotify;
    n->wire_id = NextWireId();
    n->aux = *t->request->notification;
    t->remaining = 1;
    std::shared_ptr<ClientConn> conn = t->notify_conn.lock();
    Status st = conn ? conn->Enqueue(n) : Err(StatusCode::kFailedPrecondition, "connection closed");
    if (!st.ok()) t->request->Complete(st);
    return;
  }
  t->request->Complete(Status::Ok());
}

ClientConn::ClientConn(Target target, std::string my_name, int connect_timeout_ms, DeviceCopier* copier,
                       uint64_t staging_chunk_bytes)
    : target_(std::move(target)),
      my_name_(std::move(my_name)),
      connect_timeout_ms_(connect_timeout_ms),
      copier_(copier),
      staging_chunk_(staging_chunk_bytes) {}

namespace {

std::vector<Descriptor> LocalRanges(const Stripe& s) {
  std::vector<Descriptor> ranges;
  ranges.reserve(s.segments.size());
  for (const Segment& seg : s.segments) ranges.push_back({seg.local_addr, seg.len, seg.local_device});
  return ranges;
}

Status NoCopier() {
  return Status(StatusCode::kFailedPrecondition, "no DeviceCopier: cannot stage device memory");
}

}  // namespace

ClientConn::~ClientConn() {
  Break(Err(StatusCode::kFailedPrecondition, "connection closed"));
  Join();
  if (fd_ >= 0) ::close(fd_);
}

void ClientConn::Start() { sender_ = std::thread([this] { SenderLoop(); }); }

Status ClientConn::Enqueue(std::shared_ptr<Stripe> stripe) {
  {
    std::lock_guard lock(mu_);
    if (broken_) return why_;
    outstanding_ += stripe->bytes;
    queue_.push_back(std::move(stripe));
  }
  cv_.notify_all();
  return Status::Ok();
}

bool ClientConn::broken() const {
  std::lock_guard lock(mu_);
  return broken_;
}

void ClientConn::Break(Status why) { BreakAs(Who::kOutside, std::move(why)); }

void ClientConn::BreakAs(Who who, Status why) {
  std::vector<std::shared_ptr<Stripe>> fail;
  Status status;
  {
    std::lock_guard lock(mu_);
    if (!broken_) {
      broken_ = true;
      why_ = Status(why.code(), fmt::format("tcp transfer to {} ({}:{}): {}", target_.peer_name, target_.host,
                                            target_.port, why.message()));
      if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
    }
    status = why_;
    fail.assign(queue_.begin(), queue_.end());
    queue_.clear();
    if (who == Who::kReceiver || !receiver_started_) {
      // Only the receiver writes into READ destinations; a stripe being sent belongs to the sender.
      for (auto it = awaiting_.begin(); it != awaiting_.end();) {
        if ((*it)->in_send) {
          ++it;
        } else {
          fail.push_back(*it);
          it = awaiting_.erase(it);
        }
      }
    }
  }
  cv_.notify_all();
  for (auto& s : fail) Finish(s, status);
}

void ClientConn::Finish(const std::shared_ptr<Stripe>& stripe, Status status) {
  if (stripe->finished.exchange(true)) return;
  outstanding_ -= stripe->bytes;
  StripeDone(stripe, status);
}

void ClientConn::Join() {
  if (sender_.joinable() && sender_.get_id() != std::this_thread::get_id()) sender_.join();
  if (receiver_.joinable() && receiver_.get_id() != std::this_thread::get_id()) receiver_.join();
}

Status ClientConn::CheckDeadlines() {
  std::lock_guard lock(mu_);
  if (broken_) return why_;
  auto now = std::chrono::steady_clock::now();
  for (const auto* q : {&queue_, &awaiting_}) {
    for (const auto& s : *q) {
      if (now > s->parent->request->deadline) {
        return Err(StatusCode::kInternal, "transfer {} timed out", s->parent->request->id);
      }
    }
  }
  return Status::Ok();
}

Status ClientConn::Handshake() {
  TANDEM_ASSIGN_OR_RETURN(int fd, Connect(target_.host, target_.port, connect_timeout_ms_,
                                          [&](int) { return CheckDeadlines(); }));
  {
    std::lock_guard lock(mu_);
    if (broken_) {
      ::close(fd);
      return why_;
    }
    fd_ = fd;
  }
  auto tick = [&](int) { return CheckDeadlines(); };
  std::string aux = my_name_ + "\n" + target_.instance_id;
  FrameHeader h;
  h.type = FrameType::kHello;
  h.aux_len = static_cast<uint32_t>(aux.size());
  Status sent = SendAll(fd, &h, sizeof(h), tick);
  if (sent.ok()) sent = SendAll(fd, aux.data(), aux.size(), tick);
  FrameHeader r;
  Status got = RecvAll(fd, &r, sizeof(r), tick);
  // A listener at its connection limit writes an error frame and closes without reading the
  // hello, so the hello's send can fail (EPIPE, ECONNRESET) with that frame already queued
  // here: its reason beats the send error.
  if (!got.ok()) return sent.ok() ? got : sent;
  if (r.magic != kMagic || r.aux_len > kMaxAux) return Err(StatusCode::kInternal, "bad hello response");
  std::string msg;
  got = RecvArray(fd, &msg, r.aux_len, tick);
  if (!got.ok()) return sent.ok() ? got : sent;
  if (r.type == FrameType::kError) return Status(static_cast<StatusCode>(r.status_code), msg);
  TANDEM_RETURN_IF_ERROR(sent);
  if (r.type != FrameType::kHelloOk) return Err(StatusCode::kInternal, "unexpected hello response");
  return Status::Ok();
}

Status ClientConn::SendStripe(const Stripe& s) {
  auto tick = [&](int) { return CheckDeadlines(); };
  FrameHeader h;
  h.type = s.type;
  h.flags = s.flags;
  h.xfer_id = s.wire_id;
  h.num_segments = static_cast<uint32_t>(s.segments.size());
  h.aux_len = static_cast<uint32_t>(s.aux.size());
  h.payload_len = s.type == FrameType::kWrite ? s.bytes : 0;
  const TransferRequest& req = *s.parent->request;
  if (s.type == FrameType::kWrite || s.type == FrameType::kRead) h.target_kind = static_cast<uint8_t>(req.remote_kind);
  std::string buf(sizeof(h) + s.segments.size() * sizeof(WireSegment) + s.aux.size(), '\0');
  char* p = buf.data();
  std::memcpy(p, &h, sizeof(h));
  p += sizeof(h);
  for (const Segment& seg : s.segments) {
    WireSegment w{seg.remote_addr, seg.len, seg.remote_device, 0};
    std::memcpy(p, &w, sizeof(w));
    p += sizeof(w);
  }
  std::memcpy(p, s.aux.data(), s.aux.size());
  TANDEM_RETURN_IF_ERROR(SendAll(fd_, buf.data(), buf.size(), tick));
  if (s.type == FrameType::kWrite && req.local_kind == MemoryKind::kDevice) {
    // A device error past the header leaves the payload short: the caller breaks the connection.
    if (!copier_) return NoCopier();
    if (!send_stager_) send_stager_ = std::make_unique<Stager>(*copier_, staging_chunk_);
    return send_stager_->Send(LocalRanges(s), [&](const void* p, uint64_t n) { return SendAll(fd_, p, n, tick); });
  }
  if (s.type == FrameType::kWrite) {
    for (const Segment& seg : s.segments) {
      TANDEM_RETURN_IF_ERROR(SendAll(fd_, reinterpret_cast<const void*>(seg.local_addr), seg.len, tick));
    }
  }
  return Status::Ok();
}

void ClientConn::SenderLoop() {
  Status st = Handshake();
  if (!st.ok()) {
    BreakAs(Who::kSender, st);
    receiver_done_ = true;
    sender_done_ = true;
    return;
  }
  {
    std::lock_guard lock(mu_);
    receiver_started_ = true;
    receiver_ = std::thread([this] { ReceiverLoop(); });
  }
  for (;;) {
    std::shared_ptr<Stripe> s;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return broken_ || !queue_.empty(); });
      if (broken_) break;
      s = queue_.front();
      queue_.pop_front();
      s->in_send = true;
      awaiting_.push_back(s);
    }
    st = SendStripe(*s);
    if (!st.ok()) BreakAs(Who::kSender, st);
    bool answered = false, left_to_us = false;
    Status end;
    {
      std::lock_guard lock(mu_);
      s->in_send = false;
      if (s->answered) {  // the answer came while we were still sending
        answered = true;
        end = s->answer;
      } else if (broken_) {  // the receiver left this one to us
        left_to_us = true;
        end = why_;
        for (auto it = awaiting_.begin(); it != awaiting_.end(); ++it) {
          if (*it == s) {
            awaiting_.erase(it);
            break;
          }
        }
      }
    }
    if (answered || left_to_us) Finish(s, end);
    if (left_to_us) break;
  }
  sender_done_ = true;
}

void ClientConn::ReceiverLoop() {
  auto tick = [&](int) { return CheckDeadlines(); };
  Status st;
  for (;;) {
    FrameHeader h;
    st = RecvAll(fd_, &h, sizeof(h), tick);
    if (!st.ok()) break;
    if (h.magic != kMagic || h.aux_len > kMaxAux) {
      st = Err(StatusCode::kInternal, "protocol error: bad frame header");
      break;
    }
    std::string aux;
    st = RecvArray(fd_, &aux, h.aux_len, tick);
    if (!st.ok()) break;
    std::shared_ptr<Stripe> s;
    {
      std::lock_guard lock(mu_);
      if (!awaiting_.empty()) s = awaiting_.front();
    }
    if (!s || s->wire_id != h.xfer_id) {
      st = Err(StatusCode::kInternal, "protocol error: response to an unknown request");
      break;
    }
    Status result;
    if (h.type == FrameType::kError) {
      result = Status(static_cast<StatusCode>(h.status_code), fmt::format("peer {}: {}", target_.peer_name, aux));
    } else if (h.type == FrameType::kReadData) {
      if (s->type != FrameType::kRead || h.payload_len != s->bytes) {
        st = Err(StatusCode::kInternal, "protocol error: READ data of {} bytes for {}", h.payload_len, s->bytes);
        break;
      }
      if (s->parent->request->local_kind == MemoryKind::kDevice) {
        // Staged onto the device; done only once the last chunk landed. A device error drains the
        // rest of the payload (the connection stays in step) and fails this stripe only.
        bool io_failed = false;
        if (!copier_) {
          result = NoCopier();
          st = Discard(fd_, h.payload_len, tick);
          io_failed = !st.ok();
        } else {
          if (!recv_stager_) recv_stager_ = std::make_unique<Stager>(*copier_, staging_chunk_);
          result = recv_stager_->Receive(LocalRanges(*s), [&](void* p, uint64_t n) {
            Status io = RecvAll(fd_, p, n, tick);
            io_failed = !io.ok();
            if (!io.ok()) st = io;
            return io;
          });
        }
        if (io_failed) break;
      } else {
        for (const Segment& seg : s->segments) {
          st = RecvAll(fd_, reinterpret_cast<void*>(seg.local_addr), seg.len, tick);
          if (!st.ok()) break;
        }
        if (!st.ok()) break;
      }
    } else if (h.type != FrameType::kAck) {
      st = Err(StatusCode::kInternal, "protocol error: unexpected frame type {}", static_cast<int>(h.type));
      break;
    }
    {
      std::lock_guard lock(mu_);
      if (!awaiting_.empty() && awaiting_.front() == s) awaiting_.pop_front();
      if (s->in_send) {  // the sender finishes it once it let go of the caller's buffer
        s->answered = true;
        s->answer = result;
        continue;
      }
    }
    Finish(s, result);
  }
  BreakAs(Who::kReceiver, st);
  receiver_done_ = true;
}

}  // namespace tandem::transfer::tcp
