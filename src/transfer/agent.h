// The transfer agent (DESIGN.md section 4; the NIXL shape with RAII handles).
//
//   auto agent = Agent::Create({.name = "prefill-0"});                 // local + tcp backends
//   auto reg = agent->RegisterMemory(kv, kv_bytes, MemoryKind::kHost);  // RAII: deregisters
//   std::string md = agent->ExportMetadata();   // send to peers; they LoadPeerMetadata(md)
//   auto peer = agent->LoadPeerMetadata(peer_md);                      // -> "decode-0"
//   DescList local, remote;  local.Add(src, n);  remote.Add(dst_addr, n);
//   auto h = agent->Post(Op::kWrite, local, remote, *peer, "req-42");  // does not block
//   while (h->Check() == TransferState::kInProgress) { ... }            // or h->Wait()
//   // the decode agent then sees {"prefill-0", "req-42"} in GetNotifications()
//
// Errors (Status codes): InvalidArgument for descriptor lists of different lengths, a zero-length
// descriptor, a local range outside our registrations or a remote range outside the peer's (also
// re-checked by the receiving side, which never touches memory outside a live registration);
// NotFound for an unknown peer or backend; FailedPrecondition when no backend reaches the peer.
// Transfer errors (peer gone, connection reset, timeout) end the handle in TransferState::kError.
// The destination ranges of a failed transfer may then hold part of the data (what landed before
// the fault); no copy of it touches them after the error is reported.
//
// Thread-safety: every member function may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "transfer/backend.h"
#include "transfer/transfer_stats.h"
#include "transfer/types.h"

namespace tandem::transfer {

namespace detail {
struct TransferRecord;
class AgentCore;
}  // namespace detail

struct AgentOptions {
  std::string name;  // required; peers address this agent by it
  // Backends to create, by plugin name. Built in: "local", "tcp"; "ucx", "libfabric" when built
  // with them; "cuda_ipc" once registered (RegisterCudaIpcBackend, transfer/cuda/cuda_ipc_api.h).
  std::vector<std::string> backends = {"local", "tcp"};
  // Per-backend parameters. tcp: "host" (listen/advertise address, default 127.0.0.1), "port"
  // (default 0 = ephemeral), "num_connections" (per peer, default 2), "stripe_min_bytes" (a
  // transfer at least this large is split over the connections, default 4 MiB),
  // "staging_chunk_bytes" (pinned staging buffers of device memory, default 4 MiB).
  std::map<std::string, BackendParams> backend_params;
  // Force one backend (by name) for every peer instead of the automatic choice.
  std::string backend_override;
  // A transfer not complete this long after Post ends in an error.
  std::chrono::milliseconds timeout{30000};
  // How this agent copies between host and device memory (the CUDA one: MakeCudaCopier in
  // transfer/cuda/cuda_copier.h). With it, tcp and local move device memory (kDevice) through
  // host memory; without it device memory cannot be registered (unless a backend moves it
  // natively). The agent keeps it alive.
  std::shared_ptr<DeviceCopier> device_copier;
  // Called (on a backend thread; keep it short) for each notification received. When set,
  // notifications go here instead of the GetNotifications() queue.
  std::function<void(const Notification&)> on_notification;
};

// RAII memory registration: deregisters on destruction, waiting for transfers that use the region.
class Registration {
 public:
  Registration() = default;
  Registration(Registration&& other) noexcept { *this = std::move(other); }
  Registration& operator=(Registration&& other) noexcept;
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
  ~Registration() { Reset(); }
  void Reset();

  bool valid() const { return id_ != 0; }
  uint64_t addr() const { return addr_; }
  uint64_t len() const { return len_; }
  // A descriptor for [addr + offset, +len) of this region.
  Descriptor Desc(uint64_t offset, uint64_t len) const { return {addr_ + offset, len, device_id_}; }

 private:
  friend class Agent;
  std::weak_ptr<detail::AgentCore> core_;
  uint64_t id_ = 0, addr_ = 0, len_ = 0;
  int32_t device_id_ = 0;
};

// RAII transfer handle. Destroying one whose transfer is in progress waits for the transfer to end
// (bounded by the agent's timeout), so the memory it touches may be freed right after.
class TransferHandle {
 public:
  TransferHandle() = default;
  TransferHandle(TransferHandle&&) noexcept = default;
  TransferHandle& operator=(TransferHandle&& other) noexcept;
  TransferHandle(const TransferHandle&) = delete;
  TransferHandle& operator=(const TransferHandle&) = delete;
  ~TransferHandle();

  bool valid() const { return record_ != nullptr; }
  TransferState Check() const;
  // The error of a transfer in kError; OK otherwise.
  Status status() const;
  // Waits up to `max` for the end; returns the final status, or FailedPrecondition "still in
  // progress" when `max` elapsed first.
  Status Wait(std::chrono::milliseconds max = std::chrono::milliseconds::max()) const;

  uint64_t id() const;
  uint64_t bytes() const;
  double seconds() const;       // post to completion; 0 while in progress
  size_t num_regions() const;   // coalesced regions actually moved
  const std::string& backend() const;

 private:
  friend class Agent;
  explicit TransferHandle(std::shared_ptr<detail::TransferRecord> r) : record_(std::move(r)) {}
  std::shared_ptr<detail::TransferRecord> record_;
};

struct PostOptions {
  std::string backend;  // "" = the agent's choice (or its backend_override)
  std::optional<std::chrono::milliseconds> timeout;  // default: AgentOptions::timeout
  // The local GPU computes meanwhile (a prefill's layer-wise KV sent while later layers run): a
  // backend that can copy with the GPU's SMs or with its copy engines takes the copy engines and
  // leaves the SMs to the computation (cuda_ipc's sm_ctas).
  bool while_computing = false;
  // Called once when the transfer ends (done or failed), before Check() and Wait() can see the end
  // (so once they do, it has returned). Lets a caller that drives many transfers wake up when one
  // ends instead of polling. It runs on a backend thread, or inside Post itself when the backend
  // ends the transfer there (local: small copies), and under the transfer's own lock: keep it
  // short, do not touch this transfer's handle from it, and do not take a lock that a caller
  // holds around Post, Check or Wait. Not called when Post returns an error.
  std::function<void()> on_done;
};

class Agent {
 public:
  // Errors: InvalidArgument for an empty name, NotFound for an unknown backend, or the backend's
  // own error (e.g. tcp cannot listen).
  static Result<std::unique_ptr<Agent>> Create(AgentOptions options);
  ~Agent();  // in-flight transfers end in an error; threads are joined
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  const std::string& name() const;
  std::vector<std::string> backend_names() const;

  // Registers [addr, addr + len) of `kind` on `device_id`. Re-export metadata afterwards so peers
  // see the region. Errors: InvalidArgument for an empty range or a negative device id;
  // FailedPrecondition for device memory that no backend of this agent moves (no DeviceCopier).
  Result<Registration> RegisterMemory(const void* addr, uint64_t len, MemoryKind kind = MemoryKind::kHost,
                                      int32_t device_id = 0);

  // Name, backends' connection info and registered regions, as bytes (see metadata.h).
  std::string ExportMetadata() const;
  // Learns a peer; returns its name. Loading new metadata for a known name replaces the old
  // (transfers in flight to a replaced instance end in an error).
  Result<std::string> LoadPeerMetadata(std::string_view bytes);
  // Forgets a peer; its in-flight transfers end in an error. NotFound for an unknown name.
  Status InvalidatePeer(const std::string& peer_name);
  // The backend Post would use for `peer` (automatic choice or override).
  Result<std::string> BackendFor(const std::string& peer_name, MemoryKind kind = MemoryKind::kHost) const;
  // The backend that would move memory of `kind` on `device_id` (both sides) to a peer on this
  // node and one on another node that offer every backend, for the start-up log line:
  // "tcp (host staging for cuda:0)", "ucx (host memory)", or "tcp (host memory) on this node, ucx
  // (host memory) to other nodes" when they differ. FailedPrecondition when none (or not the
  // override) moves that memory, naming why.
  Result<std::string> DescribeBackend(MemoryKind kind, int32_t device_id = 0) const;

  // Starts a transfer without blocking: local.descs[i] <-> remote.descs[i] (equal lengths).
  // Adjacent pairs contiguous on both sides (inside one region each) travel as one region.
  // `notification`: delivered to the peer as {name(), message} after the data landed.
  Result<TransferHandle> Post(Op op, const DescList& local, const DescList& remote, const std::string& peer,
                              std::optional<std::string> notification = std::nullopt,
                              const PostOptions& options = {});

  // Drains the notifications received so far (when no on_notification callback is set).
  std::vector<Notification> GetNotifications();

  TransferStats stats() const;

 private:
  explicit Agent(std::shared_ptr<detail::AgentCore> core) : core_(std::move(core)) {}
  std::shared_ptr<detail::AgentCore> core_;
};

}  // namespace tandem::transfer
