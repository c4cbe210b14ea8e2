#include "transfer/cuda_ipc_backend.h"

#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <thread>

#include "common/logging.h"
#include "transfer/cuda_ipc_control.h"
#include "transfer/cuda_ipc_trace.h"
#include "transfer/staging.h"

namespace tandem::transfer {

namespace {

using ipc::Clock;
using ipc::ControlConn;
using ipc::MsgType;

struct IpcParams {
  int num_streams = 2;
  uint64_t stream_split_bytes = 8ull << 20;
  int poll_us = 10;
  // Copies by a kernel of this many thread blocks (0: the copy engines): sm_ctas within one GPU,
  // sm_ctas_peer to or from another GPU. One H200, 1800 tokens of Qwen3-8B KV between two
  // processes on cuda:0, one run: 132 blocks 0.263 ms, 32 blocks 0.414 ms, copy engines 0.342 ms
  // (36 x 64 KiB: 0.085 / 0.090 / 0.232 ms), 2026-12-01. With END unanswered, spin_us 100 and a
  // cheaper Post (8b9130b): 132 blocks 0.210-0.213 ms; the copy engines' 36 plain copies alone
  // took 0.19-0.20 ms of the submitting thread to enqueue (trace "launch").
  int sm_ctas = 132;
  int sm_ctas_peer = 0;
  int spin_us = 100;  // ControlConn::Connect, ControlServer::Start
  int connect_timeout_ms = 5000;
};

Result<IpcParams> ParseParams(const BackendParams& params) {
  IpcParams p;
  try {
    for (const auto& [key, value] : params) {
      if (key == "num_streams") {
        p.num_streams = std::stoi(value);
        if (p.num_streams < 1 || p.num_streams > 16) throw std::out_of_range(key);
      } else if (key == "stream_split_bytes") {
        p.stream_split_bytes = std::stoull(value);
      } else if (key == "poll_us") {
        p.poll_us = std::stoi(value);
        if (p.poll_us < 1 || p.poll_us > 10000) throw std::out_of_range(key);
      } else if (key == "sm_ctas" || key == "sm_ctas_peer") {
        (key == "sm_ctas" ? p.sm_ctas : p.sm_ctas_peer) = std::stoi(value);
        if (p.sm_ctas < 0 || p.sm_ctas > 4096 || p.sm_ctas_peer < 0 || p.sm_ctas_peer > 4096) {
          throw std::out_of_range(key);
        }
      } else if (key == "spin_us") {
        p.spin_us = std::stoi(value);
        if (p.spin_us < 0 || p.spin_us > 10000) throw std::out_of_range(key);
      } else if (key == "connect_timeout_ms") {
        p.connect_timeout_ms = std::stoi(value);
      } else {
        return Err(StatusCode::kInvalidArgument, "cuda_ipc backend: unknown parameter '{}'", key);
      }
    }
  } catch (const std::exception&) {
    return Err(StatusCode::kInvalidArgument, "cuda_ipc backend: bad parameter value");
  }
  return p;
}

std::string EncodeBlob(const IpcExport& e) {
  std::string blob(8, '\0');
  std::memcpy(blob.data(), &e.offset, 8);  // little-endian hosts only (as tcp_wire.h)
  return blob + e.handle;
}

// A peer's handle mapped into this process on one device; unmapped when the last transfer using
// it (and the peer entry) let go.
struct Mapping {
  std::shared_ptr<IpcMemoryApi> api;
  uint64_t base = 0;
  int32_t device = 0;
  ~Mapping() { api->Close(base, device); }
};

struct PeerRegion {
  uint64_t addr = 0, len = 0;
  int32_t device = 0;
  std::string handle;  // "" when the peer exported none
  uint64_t offset = 0;
};

struct Peer {
  std::string name, instance_id, socket;
  std::vector<PeerRegion> regions;
  std::mutex mu;  // guards conn and mappings
  std::shared_ptr<ControlConn> conn;
  std::map<std::pair<std::string, int32_t>, std::shared_ptr<Mapping>> mappings;  // (handle, local device)
  std::atomic<bool> invalidated{false};
};

// One transfer between BEGIN and END.
struct Flight {
  std::shared_ptr<TransferRequest> request;
  std::shared_ptr<Peer> peer;
  std::shared_ptr<ControlConn> conn;
  std::vector<std::shared_ptr<Mapping>> mappings;  // kept open until the copies landed
  std::vector<std::unique_ptr<IpcEvent>> events;
  Status status;  // the first error so far
  ipc::PhaseTimes times;  // TANDEM_CUDA_IPC_TRACE
};

class CudaIpcBackend final : public Backend {
 public:
  CudaIpcBackend(BackendHost& host, std::shared_ptr<IpcMemoryApi> api, IpcParams p,
                 std::unique_ptr<ipc::ControlServer> server)
      : host_(host), api_(std::move(api)), params_(p), server_(std::move(server)) {
    submitter_ = std::thread([this] { SubmitLoop(); });
    completer_ = std::thread([this] { CompleteLoop(); });
  }
  ~CudaIpcBackend() override { Shutdown(); }

  const std::string& name() const override {
    static const std::string kName = "cuda_ipc";
    return kName;
  }
  BackendCapabilities capabilities() const override {
    BackendCapabilities c;
    c.device_memory = true;
    c.same_process = c.same_node = true;
    c.priority = 90;
    return c;
  }
  std::string ConnectionInfo() const override { return ipc::SocketName(host_.instance_id()); }

  Result<std::string> OnRegister(const RegionInfo& region) override {
    auto e = api_->Export(region.addr, region.len, region.device_id);
    if (!e.ok()) {
      return Status(e.status().code(), fmt::format("cuda_ipc backend cannot export {} [{:#x}, +{}): {}",
                                                   MemoryName(region.kind, region.device_id), region.addr,
                                                   region.len, e.status().message()));
    }
    return EncodeBlob(*e);
  }

  Status LoadPeer(const AgentMetadata& md) override {
    auto peer = std::make_shared<Peer>();
    peer->name = md.name;
    peer->instance_id = md.instance_id;
    peer->socket = md.backends.at("cuda_ipc");
    for (const RegionMetadata& r : md.regions) {
      if (r.kind != MemoryKind::kDevice) continue;
      PeerRegion pr{r.addr, r.len, r.device_id, "", 0};
      auto it = r.backend_info.find("cuda_ipc");
      if (it != r.backend_info.end() && it->second.size() > 8) {
        std::memcpy(&pr.offset, it->second.data(), 8);
        pr.handle = it->second.substr(8);
      }
      peer->regions.push_back(std::move(pr));
    }
    std::lock_guard lock(mu_);
    auto it = peers_.find(md.name);
    if (it != peers_.end()) {
      std::shared_ptr<Peer> old = it->second;
      if (old->instance_id == peer->instance_id && old->socket == peer->socket) {
        // Same instance, new regions: keep its connection and the mappings of handles still listed.
        std::lock_guard plock(old->mu);
        peer->conn = old->conn;
        for (const PeerRegion& r : peer->regions) {
          for (auto& [key, m] : old->mappings) {
            if (key.first == r.handle) peer->mappings[key] = m;
          }
        }
      } else {
        Retire(*old);
      }
    }
    peers_[md.name] = std::move(peer);
    return Status::Ok();
  }

  void InvalidatePeer(const std::string& peer_name) override {
    std::lock_guard lock(mu_);
    auto it = peers_.find(peer_name);
    if (it == peers_.end()) return;
    Retire(*it->second);
    peers_.erase(it);
  }

  Status Post(std::shared_ptr<TransferRequest> req) override {
    if (req->local_kind != MemoryKind::kDevice || req->remote_kind != MemoryKind::kDevice) {
      return Err(StatusCode::kFailedPrecondition, "the cuda_ipc backend moves device memory only");
    }
    std::lock_guard lock(mu_);
    if (stopping_) return Err(StatusCode::kFailedPrecondition, "cuda_ipc backend is shut down");
    auto it = peers_.find(req->peer);
    if (it == peers_.end()) return Err(StatusCode::kNotFound, "cuda_ipc backend does not know peer {}", req->peer);
    auto f = std::make_shared<Flight>();
    if (ipc::TraceEnabled()) f->times.posted = Clock::now();
    f->request = std::move(req);
    f->peer = it->second;
    submit_.push_back(std::move(f));
    posted_.fetch_add(1, std::memory_order_release);
    submit_cv_.notify_one();
    return Status::Ok();
  }

  void Shutdown() override {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      for (auto& [name, peer] : peers_) Retire(*peer);
      peers_.clear();
    }
    submit_cv_.notify_all();
    submitter_.join();
    completer_.join();  // after the copies in flight landed
    server_->Stop();
    queues_.clear();
    if (ipc::TraceEnabled()) trace_.Log();
  }

 private:
  // Fails the peer's transfers from now on and breaks its connection; the mappings close when the
  // transfers holding them end.
  void Retire(Peer& peer) {
    peer.invalidated = true;
    std::lock_guard lock(peer.mu);
    if (peer.conn) peer.conn->Break();
    peer.conn.reset();
    peer.mappings.clear();
  }

  Result<std::shared_ptr<ControlConn>> ConnFor(Peer& peer, Clock::time_point deadline) {
    {
      std::lock_guard lock(peer.mu);
      if (peer.invalidated) return Err(StatusCode::kNotFound, "peer {} was invalidated", peer.name);
      if (peer.conn && !peer.conn->broken()) return peer.conn;
    }
    const auto until = std::min(deadline, Clock::now() + std::chrono::milliseconds(params_.connect_timeout_ms));
    TANDEM_ASSIGN_OR_RETURN(auto conn, ControlConn::Connect(peer.socket, host_.agent_name(), peer.name,
                                                            peer.instance_id, until, stopping_, params_.spin_us));
    std::lock_guard lock(peer.mu);
    if (peer.invalidated) return Err(StatusCode::kNotFound, "peer {} was invalidated", peer.name);
    peer.conn = conn;
    return conn;
  }

  Result<std::shared_ptr<Mapping>> MappingFor(Peer& peer, const PeerRegion& r, int32_t local_device) {
    if (r.handle.empty()) {
      return Err(StatusCode::kFailedPrecondition, "peer {} exported no CUDA IPC handle for cuda:{} [{:#x}, +{})",
                 peer.name, r.device, r.addr, r.len);
    }
    std::lock_guard lock(peer.mu);
    if (peer.invalidated) return Err(StatusCode::kNotFound, "peer {} was invalidated", peer.name);
    auto key = std::make_pair(r.handle, local_device);
    auto it = peer.mappings.find(key);
    if (it != peer.mappings.end()) return it->second;
    auto base = api_->Open(r.handle, local_device);
    if (!base.ok()) {
      return Status(base.status().code(),
                    fmt::format("cannot open peer {}'s CUDA IPC handle of cuda:{} [{:#x}, +{}) on cuda:{}: {}",
                                peer.name, r.device, r.addr, r.len, local_device, base.status().message()));
    }
    auto m = std::make_shared<Mapping>();
    m->api = api_;
    m->base = *base;
    m->device = local_device;
    peer.mappings[key] = m;
    return m;
  }

  Result<IpcQueue*> QueueFor(int32_t device, int index) {
    auto& q = queues_[{device, index}];  // submitter thread only
    if (!q) {
      TANDEM_ASSIGN_OR_RETURN(q, api_->NewQueue(device));
    }
    return q.get();
  }

  // Ns since the epoch of Clock, for the atomics below.
  static int64_t NowNs() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

  // Before sleeping, the submitter polls for a post spin_us after the last transfer ended, and
  // while transfers are in flight up to 20 x spin_us after its last submit (the next post of a
  // burst, or of a caller that waits for each transfer, is likely near), so that it need not be
  // woken (some microseconds, more from a deep idle state). It yields meanwhile, so that a busy
  // host's runnable threads go first.
  void SpinForPost(uint64_t taken, int64_t last_submit_ns) {
    if (params_.spin_us <= 0) return;
    const int64_t spin_ns = int64_t{params_.spin_us} * 1000;
    while (posted_.load(std::memory_order_acquire) == taken && !stopping_) {
      const int64_t now = NowNs();
      const bool flying = in_flight_.load(std::memory_order_acquire) > 0 && now - last_submit_ns < 20 * spin_ns;
      if (!flying && now - last_end_ns_.load(std::memory_order_acquire) > spin_ns) return;
      std::this_thread::yield();
    }
  }

  void SubmitLoop() {
    uint64_t taken = 0;           // posts taken off submit_
    int64_t last_submit_ns = 0;  // when the last Submit returned
    for (;;) {
      SpinForPost(taken, last_submit_ns);
      std::shared_ptr<Flight> f;
      {
        std::unique_lock lock(mu_);
        submit_cv_.wait(lock, [&] { return stopping_ || !submit_.empty(); });
        if (submit_.empty()) {
          submit_done_ = true;  // the completion thread ends once the flights ended
          flight_cv_.notify_all();
          return;
        }
        f = std::move(submit_.front());
        submit_.pop_front();
        ++taken;
      }
      if (stopping_) {
        f->request->Complete(Err(StatusCode::kFailedPrecondition, "cuda_ipc backend shut down"));
        continue;
      }
      Submit(f);
      last_submit_ns = NowNs();
    }
  }

  // BEGIN, then the copies; on success the flight goes to the completion thread.
  void Submit(const std::shared_ptr<Flight>& f) {
    TransferRequest& req = *f->request;
    if (Clock::now() > req.deadline) {
      req.Complete(Err(StatusCode::kInternal, "transfer {} timed out before it started", req.id));
      return;
    }
    auto conn = ConnFor(*f->peer, req.deadline);
    if (!conn.ok()) {
      req.Complete(conn.status());
      return;
    }
    f->conn = *conn;
    std::vector<Descriptor> ranges;
    ranges.reserve(req.segments.size());
    for (const Segment& s : req.segments) ranges.push_back({s.remote_addr, s.len, s.remote_device});
    Status begun = f->conn->Call(MsgType::kBegin, req.id, 0, ranges, "", req.deadline, stopping_);
    if (!begun.ok()) {
      req.Complete(begun);
      return;
    }
    if (ipc::TraceEnabled()) f->times.begun = Clock::now();
    // The copies: pieces of about total / k bytes over k queues of the local device (one queue,
    // one kernel, when the SMs copy: not while the GPU computes).
    const bool peer_gpu = req.segments.front().remote_device != req.segments.front().local_device;
    const int sm_ctas = req.while_computing ? 0 : peer_gpu ? params_.sm_ctas_peer : params_.sm_ctas;
    const int k = sm_ctas == 0 && req.total_bytes >= params_.stream_split_bytes ? params_.num_streams : 1;
    const uint64_t per = (req.total_bytes + k - 1) / k;
    std::map<std::pair<int32_t, int>, IpcQueue*> used;
    std::map<IpcQueue*, std::vector<IpcQueue::CopyOp>> batches;  // submitted per queue, at once
    std::map<IpcQueue*, bool> between_devices;                    // a queue copies to another GPU
    uint64_t filled = 0;
    int index = 0;
    for (const Segment& s : req.segments) {
      const PeerRegion* region = nullptr;
      for (const PeerRegion& r : f->peer->regions) {
        if (r.device == s.remote_device && s.remote_addr >= r.addr && s.remote_addr - r.addr + s.len <= r.len) {
          region = &r;
        }
      }
      if (!region) {
        f->status = Err(StatusCode::kInvalidArgument, "cuda:{} [{:#x}, +{}) is outside peer {}'s regions",
                        s.remote_device, s.remote_addr, s.len, req.peer);
        break;
      }
      auto m = MappingFor(*f->peer, *region, s.local_device);
      if (!m.ok()) {
        f->status = m.status();
        break;
      }
      f->mappings.push_back(*m);
      const uint64_t remote = (*m)->base + region->offset + (s.remote_addr - region->addr);
      for (uint64_t off = 0; off < s.len && f->status.ok();) {
        uint64_t room = per > filled ? per - filled : 0;
        if (room == 0 && index + 1 < k) {
          ++index;
          filled = 0;
          room = per;
        }
        const uint64_t take = index + 1 == k ? s.len - off : std::min(s.len - off, room);
        auto q = QueueFor(s.local_device, index);
        if (!q.ok()) {
          f->status = q.status();
          break;
        }
        used[{s.local_device, index}] = *q;
        between_devices[*q] = between_devices[*q] || region->device != s.local_device;
        const uint64_t local = s.local_addr + off, rem = remote + off;
        batches[*q].push_back(req.op == Op::kWrite ? IpcQueue::CopyOp{rem, local, take}
                                                   : IpcQueue::CopyOp{local, rem, take});
        filled += take;
        off += take;
      }
      if (!f->status.ok()) break;
    }
    if (ipc::TraceEnabled()) f->times.planned = Clock::now();
    if (f->status.ok()) {
      for (auto& [q, ops] : batches) {
        IpcQueue::BatchOptions options;
        options.between_devices = between_devices[q];
        options.sm_ctas = sm_ctas;
        f->status = q->CopyBatch(ops, options);
        if (!f->status.ok()) break;
      }
    }
    if (ipc::TraceEnabled()) f->times.launched = Clock::now();
    // An event on every queue that got a copy, even after an error: nothing may outlive the pins.
    for (auto& [key, q] : used) {
      auto e = q->Record();
      if (e.ok()) {
        f->events.push_back(std::move(e).value());
      } else if (f->status.ok()) {
        f->status = e.status();
      }
    }
    if (!f->status.ok() && f->events.empty() && used.size() > 0) {
      // No event could be recorded: wait for the copies through the queues' destructors.
      for (auto& [key, q] : used) queues_.erase(key);
    }
    if (ipc::TraceEnabled()) f->times.enqueued = Clock::now();
    {
      std::lock_guard lock(mu_);
      flights_.push_back(f);
      in_flight_.fetch_add(1, std::memory_order_release);
    }
    flight_cv_.notify_one();
  }

  // Polls the events of the flights; ends each whose copies all landed (or failed).
  void CompleteLoop() {
#ifdef __linux__
    // Sleeps of poll_us, not poll_us + the default 50 us timer slack (measured on 2 x H200: a
    // 20 us poll with the default slack added ~0.06-0.1 ms to a small transfer).
    prctl(PR_SET_TIMERSLACK, 1000UL);
#endif
    for (;;) {
      std::vector<std::shared_ptr<Flight>> landed;
      {
        std::unique_lock lock(mu_);
        flight_cv_.wait(lock, [&] { return !flights_.empty() || submit_done_; });
        if (flights_.empty()) return;
        for (auto it = flights_.begin(); it != flights_.end();) {
          if (Landed(**it)) {
            if (ipc::TraceEnabled()) (*it)->times.landed = Clock::now();
            landed.push_back(std::move(*it));
            it = flights_.erase(it);
          } else {
            ++it;
          }
        }
      }
      for (auto& f : landed) {
        End(*f);
        last_end_ns_.store(NowNs(), std::memory_order_release);
        in_flight_.fetch_sub(1, std::memory_order_release);
      }
      if (landed.empty()) std::this_thread::sleep_for(std::chrono::microseconds(params_.poll_us));
    }
  }

  static bool Landed(Flight& f) {
    for (auto it = f.events.begin(); it != f.events.end();) {
      auto q = (*it)->Query();
      if (!q.ok()) {
        if (f.status.ok()) f.status = q.status();
        it = f.events.erase(it);  // a failed copy is over
      } else if (*q) {
        it = f.events.erase(it);
      } else {
        return false;
      }
    }
    return true;
  }

  // The copies are over: END (the target releases its pin and delivers the notification when it
  // reads it; not answered), Complete.
  void End(Flight& f) {
    TransferRequest& req = *f.request;
    f.mappings.clear();
    Status st = f.status;
    if (st.ok() && f.peer->invalidated) st = Err(StatusCode::kNotFound, "peer {} was invalidated", req.peer);
    if (st.ok() && Clock::now() > req.deadline) {
      st = Err(StatusCode::kInternal, "transfer {} timed out: its copies landed after the deadline", req.id);
    }
    uint16_t flags = st.ok() ? ipc::kSuccess : 0;
    if (req.notification) flags |= ipc::kHasNotification;
    if (!f.conn->broken()) {
      // A failed transfer still ends, so that the target releases its pin (a second at most).
      const auto until = st.ok() ? req.deadline : Clock::now() + std::chrono::seconds(1);
      Status ended = f.conn->Send(MsgType::kEnd, req.id, flags, req.notification.value_or(""), until, stopping_);
      if (st.ok()) st = ended;
      if (st.ok() && ipc::TraceEnabled()) trace_.Add(req.total_bytes, f.times, Clock::now());
    } else if (st.ok()) {
      st = Err(StatusCode::kNotFound, "peer {} is gone: its control connection broke", req.peer);
    }
    req.Complete(std::move(st));
  }

  BackendHost& host_;
  const std::shared_ptr<IpcMemoryApi> api_;
  const IpcParams params_;
  std::unique_ptr<ipc::ControlServer> server_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  bool submit_done_ = false;  // guarded by mu_
  std::atomic<uint64_t> posted_{0};     // posts ever pushed to submit_ (SpinForPost)
  std::atomic<int> in_flight_{0};       // flights between Submit and End
  std::atomic<int64_t> last_end_ns_{0};  // NowNs() when the last flight ended
  std::condition_variable submit_cv_;  // the submitter waits for posts
  std::condition_variable flight_cv_;  // the completion thread for flights
  std::map<std::string, std::shared_ptr<Peer>> peers_;
  std::deque<std::shared_ptr<Flight>> submit_;
  std::list<std::shared_ptr<Flight>> flights_;
  std::map<std::pair<int32_t, int>, std::unique_ptr<IpcQueue>> queues_;  // the submitter's
  std::thread submitter_, completer_;
  ipc::PhaseTrace trace_;
};

}  // namespace

BackendFactory MakeCudaIpcBackendFactory(std::shared_ptr<IpcMemoryApi> api) {
  return [api](BackendHost& host, const BackendParams& params) -> Result<std::unique_ptr<Backend>> {
    TANDEM_ASSIGN_OR_RETURN(IpcParams p, ParseParams(params));
    TANDEM_ASSIGN_OR_RETURN(auto server, ipc::ControlServer::Start(host, p.spin_us));
    return std::unique_ptr<Backend>(std::make_unique<CudaIpcBackend>(host, api, p, std::move(server)));
  };
}

}  // namespace tandem::transfer
