// The "libfabric" backend's class (libfabric_backend.h describes the backend): shared by
// libfabric_backend.cc (set-up, control messages, progress) and libfabric_data.cc (the RMA
// operations: WRITEs, pushed READs, completions, endpoint recovery). Progress thread only.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "transfer/fabric_rma.h"
#include "transfer/libfabric_endpoint.h"

namespace tandem::transfer::fabric {

inline constexpr size_t kNumRecv = 32;  // posted receive buffers for control messages
inline constexpr size_t kNumSend = 32;  // send slots
inline constexpr size_t kBufBytes = rma::kMaxControlBytes;
inline constexpr uint64_t kMaxOpBytes = 1ull << 30;  // one RMA operation moves at most this much
inline constexpr uint64_t kPushBit = 1ull << 63;     // data ids of pushes (ours are transfer ids)

// A peer's address in our AV (an initiator's, for replies and pushes, has no peer).
struct Link {
  std::string address;
  rma::Peer* peer = nullptr;  // null for an initiator's address, or once released
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
  uint64_t data_id = 0;
  size_t buf = 0;  // kSend / kRecv: the control buffer
  std::shared_ptr<Link> link;
};

// WRITEs from our memory into a peer's: a transfer's data phase, or a push (the target side of a
// pushed READ, answered with kGrant to `begin`). An issue cursor: fi_write may answer -FI_EAGAIN.
struct DataState {
  std::shared_ptr<Link> link;
  std::string peer_name;
  std::vector<Segment> segments;                    // local: ours; remote: the peer's
  std::vector<std::pair<uint64_t, uint64_t>> keys;  // per segment: the peer's key and region base
  size_t seg = 0;
  uint64_t off = 0;
  int outstanding = 0;
  bool issued_all = false;
  Status error;
  bool push = false;
  rma::ControlMessage begin;  // push: the request (without its segments)
  std::chrono::steady_clock::time_point deadline;
};

struct LocalMr {
  uint64_t addr = 0, len = 0, key = 0;
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
  Status Init();

 private:
  // ---- control messages (libfabric_backend.cc)
  void* Buf(size_t i) { return slab_.data() + i * kBufBytes; }
  void* SlabDesc() { return slab_mr_ ? fi_mr_desc(slab_mr_) : nullptr; }
  OpCtx* NewOp(OpCtx::Kind kind);
  void DropOp(OpCtx* op);
  void WatchCqFd();
  Status PostRecv(size_t i);
  Status PostReceives();
  bool EnsureInserted(Link& link);
  void MaybeReset(Link& link);
  void LinkFailed(const std::shared_ptr<Link>& link, const Status& why);
  Status Send(const std::shared_ptr<Link>& link, std::string bytes);
  void FlushSends();
  std::string DescribeLink(const Link& link) const { return link.peer ? link.peer->name : "an initiator"; }
  std::shared_ptr<Link> LinkOf(rma::Peer& peer);
  std::shared_ptr<Link> ReplyLink(const std::string& address);
  void* LocalDesc(uint64_t addr, uint64_t len) const;

  // ---- data (libfabric_data.cc)
  void Issue(uint64_t id);
  void CheckDone(uint64_t id);
  void OnCompletion(OpCtx* op, const Status& st, size_t len);
  void Recover(const Status& why);
  void ExpirePushes();

  // ---- the base's hooks
  Result<std::string> RegisterLocal(const RegionInfo& region) override;
  void DeregisterLocal(const RegionInfo& region) override;
  Result<std::string> ParseAddress(const std::string& info) const override;
  std::string ReplyAddress() const override { return fi_.address(); }
  Status SendControl(rma::Peer& peer, std::string bytes) override { return Send(LinkOf(peer), std::move(bytes)); }
  bool Connected(const rma::Peer& peer) const override;
  void StartData(rma::Peer& peer, rma::Xfer& x) override;
  void AbortPeer(rma::Peer& peer, const Status& why) override { Recover(why); }
  void KeepAlive(rma::Peer& peer) override;
  bool PushesReads() const override { return true; }
  Result<std::string> LocalKey(uint64_t addr, uint64_t len) override;
  void StartPush(const rma::ControlMessage& begin) override;
  void ReleasePeer(rma::Peer& peer) override;
  int Progress() override;
  void WaitEvents(int timeout_ms) override;
  void Wake() override;
  void StopTransport() override;

  const FiParams params_;
  FiEndpoint fi_;
  bool stopping_ = false;
  uint64_t generation_ = 1;  // of the AV: Recover opens a new one
  uint64_t next_key_ = 1;    // requested keys (without FI_MR_PROV_KEY): unique in the domain
  uint64_t next_push_ = 1;
  std::vector<char> slab_;  // control buffers: kNumRecv receive, then kNumSend send
  fid_mr* slab_mr_ = nullptr;
  std::vector<size_t> free_send_;
  std::vector<size_t> repost_;
  std::deque<std::pair<std::shared_ptr<Link>, std::string>> pending_sends_;
  std::map<std::string, std::shared_ptr<Link>> reply_links_;  // initiators' addresses
  std::vector<std::weak_ptr<Link>> links_;                     // every address we made
  std::set<OpCtx*> ops_;                                       // in flight
  std::map<uint64_t, DataState> data_;                         // by data id
  std::vector<uint64_t> issuing_;                              // data ids with operations left to issue
  std::map<uint64_t, LocalMr> mrs_;                            // by region id
  int wake_fd_ = -1, epoll_fd_ = -1, epoll_cq_fd_ = -1;
};

}  // namespace tandem::transfer::fabric
