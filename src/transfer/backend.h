// The backend plugin interface of the transfer agent (NIXL's backend engines, our shape).
//
// The agent validates and coalesces descriptors, pins the local regions and picks a backend; the
// backend moves bytes and completes the request exactly once. The receiving side of a backend
// re-checks every range against the target agent's registrations (BackendHost::PinRegistered)
// before touching memory, and delivers the notification only after the data landed.
//
// Backends here: "local" (same process, memcpy) and "tcp" (its own sockets) move host memory, and
// device memory through the agent's DeviceCopier (device_copier.h) when it has one: local copies
// through it, tcp stages through pinned host buffers (staging.h). "ucx" and "libfabric" (remote,
// registered memory with remote keys in backend_info) move host memory only. "cuda_ipc" (same
// node or process, device memory; IPC handles in RegionMetadata::backend_info; the initiator
// copies, the target pins and is notified over a control socket: cuda_ipc_backend.h) registers
// itself from tandem_transfer_cuda (RegisterCudaIpcBackend).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "transfer/device_copier.h"
#include "transfer/metadata.h"
#include "transfer/region_table.h"
#include "transfer/types.h"

namespace tandem::transfer {

// What a backend can do; the agent picks, per peer, the eligible backend of highest priority.
struct BackendCapabilities {
  bool host_memory = false;
  bool device_memory = false;
  bool device_staged = false;  // device memory moves through host memory (the agent's DeviceCopier)
  bool same_process = false;  // peers in this process
  bool same_node = false;     // other processes on this node
  bool remote = false;        // other nodes
  int priority = 0;           // higher wins (local 100, cuda_ipc 90, ucx 50, tcp 10)

  bool Supports(MemoryKind kind) const { return kind == MemoryKind::kHost ? host_memory : device_memory; }
  bool Reaches(Locality l) const {
    return l == Locality::kSameProcess ? same_process : l == Locality::kSameNode ? same_node : remote;
  }
};

// One coalesced pair of ranges: local [local_addr, +len) <-> remote [remote_addr, +len).
struct Segment {
  uint64_t local_addr = 0;
  uint64_t remote_addr = 0;
  uint64_t len = 0;
  int32_t local_device = 0;
  int32_t remote_device = 0;
};

// A validated transfer handed to a backend. The backend calls Complete exactly once (later calls
// are ignored), from any thread, after the data landed (WRITE: acknowledged by the target; READ:
// in local memory) or on error.
struct TransferRequest {
  uint64_t id = 0;  // unique within the initiating agent
  Op op = Op::kWrite;
  std::string peer;  // the target agent's name
  MemoryKind local_kind = MemoryKind::kHost;
  MemoryKind remote_kind = MemoryKind::kHost;
  std::vector<Segment> segments;
  uint64_t total_bytes = 0;
  std::optional<std::string> notification;  // delivered to the target after the data landed
  std::chrono::steady_clock::time_point deadline;
  bool while_computing = false;  // PostOptions::while_computing

  void Complete(Status status) {
    if (completed.exchange(true)) return;
    if (on_complete) on_complete(std::move(status));
  }
  bool done() const { return completed.load(); }

  std::function<void(Status)> on_complete;  // set by the agent
  std::atomic<bool> completed{false};
};

// What a backend may ask of the agent that owns it. Thread-safe.
class BackendHost {
 public:
  virtual ~BackendHost() = default;
  virtual const std::string& agent_name() const = 0;
  virtual const std::string& instance_id() const = 0;
  // Receiving side: pins the registered regions containing `ranges`; InvalidArgument if one lies
  // outside every registration of `kind`. Hold the pin while touching the memory.
  virtual Result<RegionPin> PinRegistered(MemoryKind kind, std::span<const Descriptor> ranges) = 0;
  // Receiving side: the data of a transfer from `peer` landed.
  virtual void DeliverNotification(Notification n) = 0;
  // How this agent reaches its device memory (AgentOptions::device_copier); null when it has
  // none, and then the host-staging backends refuse device memory.
  virtual DeviceCopier* device_copier() const { return nullptr; }
};

using BackendParams = std::map<std::string, std::string>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const std::string& name() const = 0;
  virtual BackendCapabilities capabilities() const = 0;
  // This agent's connection info for the metadata (tcp: "host:port").
  virtual std::string ConnectionInfo() const = 0;
  // Per-region data for the metadata (remote keys, IPC handles); "" when not needed.
  virtual Result<std::string> OnRegister(const RegionInfo& region) { return std::string(); }
  virtual void OnDeregister(const RegionInfo& region) {}
  // Learn (or re-learn, after a restart: new instance id) how to reach a peer. Called only when
  // the peer's metadata lists this backend.
  virtual Status LoadPeer(const AgentMetadata& peer) = 0;
  // Forget a peer: its in-flight transfers end in an error.
  virtual void InvalidatePeer(const std::string& peer_name) = 0;
  // Start a transfer without blocking. An error here means the request was not started (and
  // Complete will not be called); otherwise Complete is called exactly once, by the deadline at
  // the latest (plus the backend's polling tick).
  virtual Status Post(std::shared_ptr<TransferRequest> request) = 0;
  // Stop: in-flight transfers end in an error, threads are joined. Called before destruction.
  virtual void Shutdown() = 0;
};

using BackendFactory =
    std::function<Result<std::unique_ptr<Backend>>(BackendHost& host, const BackendParams& params)>;

// The plugin registry: "local" and "tcp" are built in; others register before creating agents.
void RegisterBackendFactory(const std::string& name, BackendFactory factory);
std::vector<std::string> RegisteredBackends();
Result<std::unique_ptr<Backend>> CreateBackend(const std::string& name, BackendHost& host,
                                               const BackendParams& params);

}  // namespace tandem::transfer
