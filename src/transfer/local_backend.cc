#include "transfer/local_backend.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <thread>

namespace tandem::transfer {

namespace {

// An agent's presence in the process registry. Copies into the agent hold `mu` shared; the agent
// going away takes it exclusively, so it waits for them.
struct Endpoint {
  std::shared_mutex mu;
  BackendHost* host = nullptr;  // null once the agent is gone
};

std::mutex registry_mu;
std::map<std::string, std::weak_ptr<Endpoint>>& Registry() {
  static auto* registry = new std::map<std::string, std::weak_ptr<Endpoint>>();
  return *registry;
}

class LocalBackend final : public Backend {
 public:
  explicit LocalBackend(BackendHost& host) : host_(host), self_(std::make_shared<Endpoint>()) {
    self_->host = &host;
    std::lock_guard lock(registry_mu);
    Registry()[host.instance_id()] = self_;
    worker_ = std::thread([this] { Run(); });
  }
  ~LocalBackend() override { Shutdown(); }

  const std::string& name() const override {
    static const std::string kName = "local";
    return kName;
  }
  BackendCapabilities capabilities() const override {
    BackendCapabilities c;
    c.host_memory = true;
    c.device_memory = host_.device_copier() != nullptr;  // copies through it
    c.same_process = true;
    c.priority = 100;
    return c;
  }
  std::string ConnectionInfo() const override { return host_.instance_id(); }

  Status LoadPeer(const AgentMetadata& peer) override {
    std::lock_guard lock(registry_mu);
    auto it = Registry().find(peer.instance_id);
    std::shared_ptr<Endpoint> ep = it == Registry().end() ? nullptr : it->second.lock();
    if (!ep) return Err(StatusCode::kNotFound, "no agent {} ({}) in this process", peer.name, peer.instance_id);
    std::lock_guard plock(mu_);
    peers_[peer.name] = ep;
    return Status::Ok();
  }
  void InvalidatePeer(const std::string& peer_name) override {
    std::lock_guard lock(mu_);
    peers_.erase(peer_name);
  }

  Status Post(std::shared_ptr<TransferRequest> request) override {
    std::unique_lock lock(mu_);
    if (stopping_) return Err(StatusCode::kFailedPrecondition, "local backend is shut down");
    auto it = peers_.find(request->peer);
    if (it == peers_.end()) return Err(StatusCode::kNotFound, "local backend does not know peer {}", request->peer);
    if (request->total_bytes <= kInlineBytes && queue_.empty()) {
      // A small copy (microseconds) costs less than waking the worker: do it here.
      std::weak_ptr<Endpoint> target = it->second;
      lock.unlock();
      request->Complete(Copy(*request, target));
      return Status::Ok();
    }
    queue_.push_back({std::move(request), it->second});
    cv_.notify_one();
    return Status::Ok();
  }

  void Shutdown() override {
    {
      std::lock_guard lock(mu_);
      if (stopping_ && !worker_.joinable()) return;
      stopping_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    {
      std::lock_guard lock(registry_mu);
      Registry().erase(host_.instance_id());
    }
    std::unique_lock exclusive(self_->mu);  // waits for copies into this agent
    self_->host = nullptr;
  }

 private:
  static constexpr uint64_t kInlineBytes = 256 << 10;

  struct Job {
    std::shared_ptr<TransferRequest> request;
    std::weak_ptr<Endpoint> target;
  };

  void Run() {
    for (;;) {
      Job job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping
        job = std::move(queue_.front());
        queue_.pop_front();
        if (stopping_) {
          job.request->Complete(Err(StatusCode::kFailedPrecondition, "local backend shut down"));
          continue;
        }
      }
      job.request->Complete(Copy(*job.request, job.target));
    }
  }

  Status Copy(TransferRequest& req, const std::weak_ptr<Endpoint>& weak_target) {
    if (std::chrono::steady_clock::now() > req.deadline) {
      return Err(StatusCode::kInternal, "transfer {} timed out before it started", req.id);
    }
    std::shared_ptr<Endpoint> target = weak_target.lock();
    if (!target) return Err(StatusCode::kNotFound, "peer {} is gone", req.peer);
    std::shared_lock lock(target->mu);
    if (!target->host) return Err(StatusCode::kNotFound, "peer {} is gone", req.peer);
    std::vector<Descriptor> ranges;
    ranges.reserve(req.segments.size());
    for (const Segment& s : req.segments) ranges.push_back({s.remote_addr, s.len, s.remote_device});
    // The target's side of the check: its registrations now, pinned while we copy.
    auto pin = target->host->PinRegistered(req.remote_kind, ranges);
    if (!pin.ok()) return Err(pin.status().code(), "peer {} refused: {}", req.peer, pin.status().message());
    if (req.local_kind == MemoryKind::kHost && req.remote_kind == MemoryKind::kHost) {
      for (const Segment& s : req.segments) {
        auto* local = reinterpret_cast<void*>(s.local_addr);
        auto* remote = reinterpret_cast<void*>(s.remote_addr);
        if (req.op == Op::kWrite) {
          std::memmove(remote, local, s.len);
        } else {
          std::memmove(local, remote, s.len);
        }
      }
    } else {
      TANDEM_RETURN_IF_ERROR(DeviceCopy(req));  // landed (synced) when it returns
    }
    pin->Release();
    if (req.notification) target->host->DeliverNotification({host_.agent_name(), *req.notification});
    return Status::Ok();
  }

  // Copies with device memory on either side through this agent's DeviceCopier (one process: the
  // peer's device memory is ours to reach). Returns after every copy landed.
  Status DeviceCopy(const TransferRequest& req) {
    DeviceCopier* copier = host_.device_copier();
    if (!copier) {
      return Err(StatusCode::kFailedPrecondition, "agent {} has no DeviceCopier: the local backend cannot copy device memory",
                 host_.agent_name());
    }
    std::map<int32_t, std::unique_ptr<CopyStream>> streams;
    auto stream = [&](int32_t device) -> Result<CopyStream*> {
      auto it = streams.find(device);
      if (it != streams.end()) return it->second.get();
      TANDEM_ASSIGN_OR_RETURN(auto s, copier->NewStream(device));
      return (streams[device] = std::move(s)).get();
    };
    Status st;
    for (const Segment& s : req.segments) {
      const bool write = req.op == Op::kWrite;
      const MemoryKind src_kind = write ? req.local_kind : req.remote_kind;
      const MemoryKind dst_kind = write ? req.remote_kind : req.local_kind;
      const uint64_t src = write ? s.local_addr : s.remote_addr;
      const uint64_t dst = write ? s.remote_addr : s.local_addr;
      const int32_t src_dev = write ? s.local_device : s.remote_device;
      const int32_t dst_dev = write ? s.remote_device : s.local_device;
      if (src_kind == MemoryKind::kHost && dst_kind == MemoryKind::kHost) {
        std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), s.len);
        continue;
      }
      auto cs = stream(dst_kind == MemoryKind::kDevice ? dst_dev : src_dev);
      if (!cs.ok()) {
        st = cs.status();
        break;
      }
      if (src_kind == MemoryKind::kHost) {
        st = (*cs)->FromHost(dst, reinterpret_cast<const void*>(src), s.len);
      } else if (dst_kind == MemoryKind::kHost) {
        st = (*cs)->ToHost(reinterpret_cast<void*>(dst), src, s.len);
      } else {
        st = (*cs)->DeviceToDevice(dst, src_dev, src, s.len);
      }
      if (!st.ok()) break;
    }
    for (auto& [device, cs] : streams) {  // always: no copy may outlive the pins
      Status synced = cs->Sync();
      if (st.ok()) st = synced;
    }
    return st;
  }

  BackendHost& host_;
  std::shared_ptr<Endpoint> self_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::deque<Job> queue_;
  std::map<std::string, std::weak_ptr<Endpoint>> peers_;
  std::thread worker_;
};

}  // namespace

Result<std::unique_ptr<Backend>> MakeLocalBackend(BackendHost& host, const BackendParams& params) {
  if (!params.empty()) return Err(StatusCode::kInvalidArgument, "the local backend takes no parameters");
  return std::unique_ptr<Backend>(std::make_unique<LocalBackend>(host));
}

}  // namespace tandem::transfer
