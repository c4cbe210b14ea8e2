// The common part of the RMA backends ("ucx", "libfabric"): peers, the control protocol
// (fabric_control.h: kBegin/kGrant, the data phase, kEnd/kAck), deadlines and one progress thread
// per backend that makes every call into the fabric library. A transport (ucx_backend.cc,
// libfabric_backend.cc) supplies the hooks below; they all run on the progress thread, except
// ParseAddress.
//
// A transfer: Post (any thread) queues it; the progress thread computes the bounds of the remote
// ranges per remote region, sends kBegin and waits for kGrant; then StartData issues one RMA
// operation per coalesced segment (READ: get into local memory, WRITE: put into the peer's) and
// calls DataDone once every operation completed (WRITE: remotely); then kEnd releases the target's
// pin and carries the notification, and a transfer with a notification completes on kAck, after the
// target delivered it. A transport may push READs instead (PushesReads: the target writes, kGrant
// says the data landed). Errors: a refused kBegin (InvalidArgument for a range the target no longer
// registers, FailedPrecondition for a restarted target), a broken connection (the transport calls
// PeerBroken, then DataDone with an error for the data in flight), the deadline (a tick of at most
// 10 ms: AbortPeer cancels the peer's data in flight, whose local memory is untouched once DataDone
// ran, or, for a pushed READ, once AbortPeer returned). While a transfer awaits a peer's answer,
// KeepAlive lets the transport probe the peer every 200 ms. A transfer completes with an error only
// once no operation of it can touch memory. Units: bytes, addresses of the owning process.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "transfer/backend.h"
#include "transfer/fabric_control.h"

namespace tandem::transfer::rma {

// A transport's state for one peer (an endpoint, unpacked remote keys); null until first used and
// after the transport dropped it.
struct PeerConn {
  virtual ~PeerConn() = default;
};

struct Peer {
  std::string name;
  std::string instance_id;
  std::string address;              // the transport's address of the peer (ParseAddress)
  std::vector<RegionSpan> regions;  // the peer's host regions that carry this backend's key
  std::vector<std::string> keys;    // per region: the backend's blob from the metadata
  std::unique_ptr<PeerConn> conn;
  bool retired = false;  // replaced or invalidated: dropped once `active` reaches 0
  int active = 0;        // transfers in flight
};

enum class Phase { kAwaitGrant, kData, kAwaitAck };

struct Xfer {
  std::shared_ptr<TransferRequest> req;
  std::shared_ptr<Peer> peer;
  Phase phase = Phase::kAwaitGrant;
  bool data_pending = false;  // StartData ran, DataDone not yet (pushed: kBegin sent, kGrant not yet)
  bool pushed = false;        // a READ the target pushes (PushesReads)
  Status error;               // the first error seen while data was pending
};

class RmaBackend : public Backend {
 public:
  RmaBackend(BackendHost& host, std::string name, BackendCapabilities caps);
  ~RmaBackend() override;

  const std::string& name() const override { return name_; }
  BackendCapabilities capabilities() const override { return caps_; }
  std::string ConnectionInfo() const override { return connection_info_; }
  Result<std::string> OnRegister(const RegionInfo& region) override;
  void OnDeregister(const RegionInfo& region) override;
  Status LoadPeer(const AgentMetadata& peer) override;
  void InvalidatePeer(const std::string& peer_name) override;
  Status Post(std::shared_ptr<TransferRequest> request) override;
  void Shutdown() override;

 protected:
  // ---- for the transport
  // Starts the progress thread; call once the transport is ready (and connection_info_ is set).
  void StartProgressThread();
  // An incoming control message; `reply(request, bytes)` sends bytes back to the sender of
  // `request` (the decoded message: libfabric replies to its reply_address).
  using ReplyFn = std::function<Status(const ControlMessage& request, std::string bytes)>;
  void HandleControl(std::string_view bytes, const ReplyFn& reply);
  // The data phase of transfer `xfer_id` ended: every operation of it completed or was cancelled.
  void DataDone(uint64_t xfer_id, Status status);
  // The connection to `peer` broke: transfers waiting for its answer fail now; those with data in
  // flight fail at their DataDone, which the transport owes them.
  void PeerBroken(Peer& peer, const Status& why);
  BackendHost& host() { return host_; }
  const std::map<uint64_t, Xfer>& xfers() const { return xfers_; }
  bool on_progress_thread() const { return std::this_thread::get_id() == thread_.get_id(); }
  std::string connection_info_;

  // ---- the transport's hooks (progress thread)
  virtual Result<std::string> RegisterLocal(const RegionInfo& region) = 0;  // the region's blob
  virtual void DeregisterLocal(const RegionInfo& region) = 0;
  // Any thread: the peer's address from its connection info (checks the blob's version).
  virtual Result<std::string> ParseAddress(const std::string& connection_info) const = 0;
  // The address the target replies to ("" when the transport routes replies itself).
  virtual std::string ReplyAddress() const = 0;
  virtual Status SendControl(Peer& peer, std::string bytes) = 0;  // connects lazily
  virtual bool Connected(const Peer& peer) const = 0;            // a connection that did not break
  // Issues the data operations of `x`; DataDone(x.req->id, ...) follows exactly once, after all of
  // them ended (it may come from inside this call).
  virtual void StartData(Peer& peer, Xfer& x) = 0;
  // Cancels the peer's data in flight (their DataDone follow) and drops its connection.
  virtual void AbortPeer(Peer& peer, const Status& why) = 0;
  // No transfers left (or shutting down): drop the connection. Idempotent.
  virtual void ReleasePeer(Peer& peer) = 0;
  // Every 200 ms while a transfer to `peer` waits for its answer: a transport that would not
  // notice a dead peer otherwise checks it (libfabric sends kPing).
  virtual void KeepAlive(Peer& peer) {}
  // READs as pushes (fabric_control.h): the initiator sends its keys (LocalKey: the blob of the
  // registered region containing a range) and the target's StartPush writes the data, then answers
  // kGrant to begin.reply_address itself. AbortPeer must then also stop what the peer pushes into
  // this agent's memory.
  virtual bool PushesReads() const { return false; }
  virtual Result<std::string> LocalKey(uint64_t addr, uint64_t len) {
    return Err(StatusCode::kUnimplemented, "no pushed reads");
  }
  virtual void StartPush(const ControlMessage& begin) {}
  virtual int Progress() = 0;                // handles what completed; returns how many events
  virtual void WaitEvents(int timeout_ms) = 0;
  virtual void Wake() = 0;           // any thread, under the base's lock: WaitEvents returns
  virtual void StopTransport() = 0;  // at shutdown: afterwards no operation touches memory

 private:
  void Loop();
  void Submit(std::function<void()> fn);
  void WakeLocked();  // mu_ held: Wake(), unless the thread is stopping
  template <typename T>
  T RunSync(std::function<T()> fn);
  void ApplyPeer(std::shared_ptr<Peer> peer);
  void Retire(const std::shared_ptr<Peer>& peer, const Status& why);
  void StartXfer(std::shared_ptr<TransferRequest> req);
  void OnGrant(const ControlMessage& m);
  void OnAck(const ControlMessage& m);
  void SendEnd(Xfer& x, const Status& status, bool want_ack);
  void AfterData(uint64_t xfer_id, Status status);
  // PeerBroken + the transport's AbortPeer; then pushed READs from the peer end too.
  void Abort(const std::shared_ptr<Peer>& peer, const Status& why);
  void Finish(uint64_t xfer_id, Status status);
  void Tick();
  void StopOnThread();

  BackendHost& host_;
  const std::string name_;
  const BackendCapabilities caps_;
  GuardTable guards_;

  std::mutex mu_;  // guards the fields up to thread_
  std::deque<std::function<void()>> commands_;
  std::set<std::string> known_;  // peers Post may name
  bool stop_ = false;
  bool shut_down_ = false;
  std::thread thread_;
  std::atomic<bool> thread_done_{false};

  // Progress thread only.
  std::map<std::string, std::shared_ptr<Peer>> peers_;
  std::vector<std::shared_ptr<Peer>> retired_;
  std::map<uint64_t, Xfer> xfers_;
  std::set<std::shared_ptr<Peer>> abort_;  // broken with pushed READs in flight: aborted at the next tick
  std::chrono::steady_clock::time_point last_tick_, last_keepalive_;
};

}  // namespace tandem::transfer::rma
