// The "libfabric" backend's data path (libfabric_backend.h): WRITEs of a transfer's data phase and
// pushes (the target side of a READ: fabric_control.h), their completions, and the endpoint
// recovery that stops them. Every RMA operation here is an fi_write from this agent's memory into a
// peer's: an initiator never has an fi_read in flight, because libfabric 1.17's tcp;ofi_rxm crashes
// in fi_close of an endpoint whose READ response is half received (a peer stopped mid-READ), and
// closing the endpoint is the only way to stop RMA in flight at a deadline.
#include <algorithm>

#include "common/logging.h"
#include "transfer/libfabric_internal.h"

namespace tandem::transfer::fabric {

using Clock = std::chrono::steady_clock;

void LibfabricBackend::StartData(rma::Peer& peer, rma::Xfer& x) {
  uint64_t id = x.req->id;
  DataState& ds = data_[id];
  ds.link = LinkOf(peer);
  ds.peer_name = peer.name;
  ds.segments = x.req->segments;
  int hint = -1;
  for (const Segment& s : ds.segments) {
    hint = rma::FindSpan(peer.regions, s.remote_addr, s.len, hint);
    auto key = hint < 0 ? Result<std::pair<uint64_t, uint64_t>>(Err(StatusCode::kInvalidArgument, "no key"))
                        : DecodeRegionKey(peer.keys[hint]);
    if (!key.ok()) {
      ds.error = Err(StatusCode::kInvalidArgument, "libfabric: remote range {:#x}+{}: {}", s.remote_addr, s.len,
                     key.status().message());
      break;
    }
    ds.keys.push_back(*key);
  }
  if (x.req->op != Op::kWrite) ds.error = Err(StatusCode::kInternal, "libfabric: READs are pushed");
  if (ds.link->broken || !fi_.open()) {
    ds.error = Err(StatusCode::kInternal, "libfabric: the connection to {} broke", peer.name);
  }
  issuing_.push_back(id);
  Issue(id);
}

void LibfabricBackend::StartPush(const rma::ControlMessage& begin) {
  uint64_t id = kPushBit | next_push_++;
  DataState& ds = data_[id];
  ds.push = true;
  ds.begin = begin;
  ds.begin.push.clear();
  ds.begin.keys.clear();
  ds.begin.bounds.clear();
  ds.link = ReplyLink(begin.reply_address);
  ds.peer_name = begin.initiator;
  ds.deadline = Clock::now() + std::chrono::milliseconds(begin.timeout_ms) + std::chrono::milliseconds(500);
  for (const rma::PushSegment& p : begin.push) {
    auto key = DecodeRegionKey(begin.keys[p.key]);
    if (!key.ok()) {
      ds.error = key.status();
      break;
    }
    ds.segments.push_back({p.target_addr, p.initiator_addr, p.len, 0, 0});
    ds.keys.push_back(*key);
  }
  if (ds.link->broken || !fi_.open()) ds.error = Err(StatusCode::kInternal, "libfabric: the initiator is unreachable");
  issuing_.push_back(id);
  Issue(id);
}

// Issues what it can of `id`; ends it when nothing is left in flight.
void LibfabricBackend::Issue(uint64_t id) {
  auto it = data_.find(id);
  if (it == data_.end()) return;
  DataState& ds = it->second;
  while (!ds.issued_all && ds.error.ok()) {
    if (ds.seg == ds.segments.size()) break;
    const Segment& s = ds.segments[ds.seg];
    uint64_t len = std::min({s.len - ds.off, kMaxOpBytes, fi_.max_msg_size()});
    uint64_t remote = s.remote_addr + ds.off;
    auto [key, base] = ds.keys[ds.seg];
    if (!(fi_.mr_mode() & FI_MR_VIRT_ADDR)) remote -= base;  // an offset into the region
    if (!EnsureInserted(*ds.link)) {
      ds.error = Err(StatusCode::kInternal, "libfabric: fi_av_insert of {} failed", ds.peer_name);
      break;
    }
    OpCtx* op = NewOp(OpCtx::kData);
    op->data_id = id;
    op->link = ds.link;
    ssize_t rc = fi_write(fi_.ep(), reinterpret_cast<void*>(s.local_addr + ds.off), len, LocalDesc(s.local_addr, s.len),
                          ds.link->addr, remote, key, &op->ctx);
    if (rc != 0) {
      DropOp(op);
      if (rc == -FI_EAGAIN) return;  // the CQ must move first; Progress comes back
      ds.error = FiError(fmt::format("fi_write to {}", ds.peer_name), rc);
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

void LibfabricBackend::CheckDone(uint64_t id) {
  auto it = data_.find(id);
  if (it == data_.end() || !it->second.issued_all || it->second.outstanding > 0) return;
  DataState ds = std::move(it->second);
  data_.erase(it);
  if (!ds.push) {
    DataDone(id, ds.error);
    return;
  }
  // The pushed READ landed in the initiator's memory (or failed): answer its kBegin.
  Status st = ds.error.ok() ? Status::Ok()
                            : Status(ds.error.code(), fmt::format("agent {}: {}", host().agent_name(),
                                                                  ds.error.message()));
  if (fi_.open() && !ds.link->broken) {
    (void)Send(ds.link, rma::EncodeControl(rma::ReplyTo(ds.begin, rma::ControlType::kGrant, st)));
  }
}

void LibfabricBackend::OnCompletion(OpCtx* op, const Status& st, size_t len) {
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
      return Send(ReplyLink(request.reply_address), std::move(out));
    });
    return;
  }
  std::shared_ptr<Link> link = op->link;
  link->outstanding--;
  if (op->kind == OpCtx::kSend) {
    free_send_.push_back(op->buf);
  } else if (auto it = data_.find(op->data_id); it != data_.end()) {
    it->second.outstanding--;
    if (!st.ok() && it->second.error.ok()) it->second.error = st;
  }
  if (!st.ok()) {
    LinkFailed(link, st);
  } else {
    MaybeReset(*link);
  }
  if (op->kind == OpCtx::kData) CheckDone(op->data_id);
}

// Closes the endpoint (every operation in flight is dropped: its data fails) and opens it again on
// the same address. Stops as well what peers were writing into this agent's memory.
void LibfabricBackend::Recover(const Status& why) {
  if (fi_.open()) {
    for (auto& weak : links_) {
      auto link = weak.lock();
      if (link && link->generation == generation_) fi_av_remove(fi_.av(), &link->addr, 1, 0);
    }
  }
  std::erase_if(links_, [](const std::weak_ptr<Link>& w) { return w.expired(); });
  fi_.CloseEndpoint();  // no operation touches memory after this
  generation_++;
  for (OpCtx* op : ops_) {
    if (op->link) op->link->outstanding--;
    if (op->kind == OpCtx::kSend) free_send_.push_back(op->buf);
    if (op->kind == OpCtx::kData) {
      auto it = data_.find(op->data_id);
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
    if (ds.error.ok()) ds.error = why;
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

// A push still running after its initiator's deadline (plus a margin below the guard's grace):
// the initiator gave up; stop writing from memory whose pin is about to expire.
void LibfabricBackend::ExpirePushes() {
  auto now = Clock::now();
  for (const auto& [id, ds] : data_) {
    if (ds.push && now > ds.deadline) {
      Recover(Err(StatusCode::kInternal, "libfabric: a pushed READ for {} outlived its deadline", ds.peer_name));
      return;
    }
  }
}

}  // namespace tandem::transfer::fabric
