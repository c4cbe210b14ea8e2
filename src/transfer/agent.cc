#include "transfer/agent.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "common/logging.h"
#include "transfer/coalesce.h"
#include "transfer/local_backend.h"
#include "transfer/staging.h"
#include "transfer/tcp_backend.h"
#ifdef TANDEM_HAVE_UCX
#include "transfer/ucx_backend.h"
#endif
#ifdef TANDEM_HAVE_LIBFABRIC
#include "transfer/libfabric_backend.h"
#endif

namespace tandem::transfer {

// ---------------------------------------------------------------- the plugin registry

namespace {

std::mutex& FactoryMutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, BackendFactory>& Factories() {
  static std::map<std::string, BackendFactory> factories = [] {
    std::map<std::string, BackendFactory> f;
    f["local"] = MakeLocalBackend;
    f["tcp"] = MakeTcpBackend;
#ifdef TANDEM_HAVE_UCX
    f["ucx"] = MakeUcxBackend;  // built with UCX (CMake: TANDEM_HAVE_UCX)
#endif
#ifdef TANDEM_HAVE_LIBFABRIC
    f["libfabric"] = MakeLibfabricBackend;  // built with libfabric (TANDEM_HAVE_LIBFABRIC)
#endif
    return f;
  }();
  return factories;
}

}  // namespace

void RegisterBackendFactory(const std::string& name, BackendFactory factory) {
  std::lock_guard lock(FactoryMutex());
  Factories()[name] = std::move(factory);
}

std::vector<std::string> RegisteredBackends() {
  std::lock_guard lock(FactoryMutex());
  std::vector<std::string> names;
  for (const auto& [name, f] : Factories()) names.push_back(name);
  return names;
}

Result<std::unique_ptr<Backend>> CreateBackend(const std::string& name, BackendHost& host,
                                               const BackendParams& params) {
  BackendFactory factory;
  {
    std::lock_guard lock(FactoryMutex());
    auto it = Factories().find(name);
    if (it == Factories().end()) return Err(StatusCode::kNotFound, "no transfer backend named '{}'", name);
    factory = it->second;
  }
  return factory(host, params);
}

// ---------------------------------------------------------------- shared state

namespace detail {

struct TransferRecord {
  uint64_t id = 0;
  uint64_t bytes = 0;
  size_t num_regions = 0;
  std::string backend;
  std::chrono::steady_clock::time_point start;

  std::mutex mu;
  std::condition_variable cv;
  TransferState state = TransferState::kInProgress;
  Status status;
  double seconds = 0.0;
  RegionPin local_pin;
  std::function<void()> on_done;  // PostOptions::on_done
};

struct PeerEntry {
  AgentMetadata md;
  Locality locality = Locality::kRemote;
  std::vector<std::string> backends;  // ours that loaded this peer
};

class AgentCore : public BackendHost {
 public:
  explicit AgentCore(AgentOptions o) : options(std::move(o)), instance(RandomId()) {}
  ~AgentCore() override { Shutdown(); }

  const std::string& agent_name() const override { return options.name; }
  const std::string& instance_id() const override { return instance; }
  Result<RegionPin> PinRegistered(MemoryKind kind, std::span<const Descriptor> ranges) override {
    return regions->Pin(kind, ranges);
  }
  DeviceCopier* device_copier() const override { return options.device_copier.get(); }
  void DeliverNotification(Notification n) override {
    if (options.on_notification) {
      options.on_notification(n);
      return;
    }
    std::lock_guard lock(mu);
    notifications.push_back(std::move(n));
  }

  void Shutdown() {
    std::vector<Backend*> bs;
    {
      std::lock_guard lock(mu);
      if (shut_down) return;
      shut_down = true;
      for (auto& b : backends) bs.push_back(b.get());
    }
    for (Backend* b : bs) b->Shutdown();
  }

  Backend* FindBackend(const std::string& name) const {
    for (const auto& b : backends) {
      if (b->name() == name) return b.get();
    }
    return nullptr;
  }

  Result<Backend*> Choose(const PeerEntry& peer, const std::string& forced, MemoryKind local_kind,
                          MemoryKind remote_kind) const {
    auto eligible = [&](const Backend& b) {
      BackendCapabilities caps = b.capabilities();
      return caps.Reaches(peer.locality) && caps.Supports(local_kind) && caps.Supports(remote_kind) &&
             std::find(peer.backends.begin(), peer.backends.end(), b.name()) != peer.backends.end();
    };
    if (!forced.empty()) {
      Backend* b = FindBackend(forced);
      if (!b) return Err(StatusCode::kNotFound, "agent {} has no backend '{}'", options.name, forced);
      if (!eligible(*b)) {
        return Err(StatusCode::kFailedPrecondition, "backend {} cannot reach peer {} ({}, {} -> {} memory)",
                   forced, peer.md.name, LocalityName(peer.locality), MemoryKindName(local_kind),
                   MemoryKindName(remote_kind));
      }
      return b;
    }
    Backend* best = nullptr;
    for (const auto& b : backends) {
      if (eligible(*b) && (!best || b->capabilities().priority > best->capabilities().priority)) best = b.get();
    }
    if (!best) {
      return Err(StatusCode::kFailedPrecondition, "no backend of agent {} reaches peer {} ({}, {} -> {} memory)",
                 options.name, peer.md.name, LocalityName(peer.locality), MemoryKindName(local_kind),
                 MemoryKindName(remote_kind));
    }
    return best;
  }

  void Count(const TransferRecord& r, bool ok, double seconds) {
    std::lock_guard lock(mu);
    if (ok) {
      stats.num_transfers++;
      stats.bytes += r.bytes;
      stats.seconds += seconds;
      stats.num_regions += r.num_regions;
    } else {
      stats.num_errors++;
    }
  }

  AgentOptions options;
  const std::string instance;
  std::shared_ptr<RegionTable> regions = std::make_shared<RegionTable>();
  std::vector<std::unique_ptr<Backend>> backends;  // fixed after Create

  mutable std::mutex mu;
  bool shut_down = false;
  std::map<std::string, std::shared_ptr<const PeerEntry>> peers;
  std::deque<Notification> notifications;
  std::map<uint64_t, std::map<std::string, std::string>> blobs;  // region id -> backend -> blob
  TransferStats stats;
  std::atomic<uint64_t> next_id{1};
};

}  // namespace detail

using detail::AgentCore;
using detail::TransferRecord;

namespace {

// Ends the record (releases our pinned regions first).
void FinishRecord(TransferRecord& r, Status s, double seconds) {
  r.local_pin.Release();
  {
    std::lock_guard lock(r.mu);
    r.seconds = seconds;
    r.state = s.ok() ? TransferState::kDone : TransferState::kError;
    r.status = std::move(s);
    // Under the lock: whoever sees the end through Check() or Wait() knows the callback returned.
    if (r.on_done) std::exchange(r.on_done, nullptr)();
  }
  r.cv.notify_all();
}

}  // namespace

// ---------------------------------------------------------------- Registration

Registration& Registration::operator=(Registration&& other) noexcept {
  if (this != &other) {
    Reset();
    core_ = std::move(other.core_);
    id_ = std::exchange(other.id_, 0);
    addr_ = other.addr_;
    len_ = other.len_;
    device_id_ = other.device_id_;
  }
  return *this;
}

void Registration::Reset() {
  if (id_ == 0) return;
  if (auto core = core_.lock()) {
    RegionInfo info;
    for (const auto& r : core->regions->List()) {
      if (r.id == id_) info = r;
    }
    core->regions->Remove(id_);  // waits for transfers that pinned it
    for (auto& b : core->backends) b->OnDeregister(info);
  }
  id_ = 0;
  core_.reset();
}

// ---------------------------------------------------------------- TransferHandle

TransferHandle& TransferHandle::operator=(TransferHandle&& other) noexcept {
  if (this != &other) {
    if (record_) (void)Wait();
    record_ = std::move(other.record_);
  }
  return *this;
}

TransferHandle::~TransferHandle() {
  if (record_) (void)Wait();
}

TransferState TransferHandle::Check() const {
  std::lock_guard lock(record_->mu);
  return record_->state;
}

Status TransferHandle::status() const {
  std::lock_guard lock(record_->mu);
  return record_->status;
}

Status TransferHandle::Wait(std::chrono::milliseconds max) const {
  std::unique_lock lock(record_->mu);
  auto done = [&] { return record_->state != TransferState::kInProgress; };
  if (max == std::chrono::milliseconds::max()) {
    record_->cv.wait(lock, done);
  } else if (!record_->cv.wait_for(lock, max, done)) {
    return Err(StatusCode::kFailedPrecondition, "transfer {} still in progress after {} ms", record_->id, max.count());
  }
  return record_->status;
}

uint64_t TransferHandle::id() const { return record_->id; }
uint64_t TransferHandle::bytes() const { return record_->bytes; }
double TransferHandle::seconds() const {
  std::lock_guard lock(record_->mu);
  return record_->seconds;
}
size_t TransferHandle::num_regions() const { return record_->num_regions; }
const std::string& TransferHandle::backend() const { return record_->backend; }

// ---------------------------------------------------------------- Agent

Result<std::unique_ptr<Agent>> Agent::Create(AgentOptions options) {
  if (options.name.empty()) return Err(StatusCode::kInvalidArgument, "a transfer agent needs a name");
  // An override names a backend the list may lack (e.g. --kv-transfer-backend ucx): create it too.
  const std::string& forced = options.backend_override;
  if (!forced.empty() && std::find(options.backends.begin(), options.backends.end(), forced) == options.backends.end()) {
    options.backends.push_back(forced);
  }
  auto core = std::make_shared<AgentCore>(std::move(options));
  for (const std::string& name : core->options.backends) {
    static const BackendParams kNone;
    auto it = core->options.backend_params.find(name);
    TANDEM_ASSIGN_OR_RETURN(auto backend,
                            CreateBackend(name, *core, it == core->options.backend_params.end() ? kNone : it->second));
    core->backends.push_back(std::move(backend));
  }
  if (!core->options.backend_override.empty() && !core->FindBackend(core->options.backend_override)) {
    return Err(StatusCode::kNotFound, "backend override '{}' is not among the agent's backends",
               core->options.backend_override);
  }
  return std::unique_ptr<Agent>(new Agent(std::move(core)));
}

Agent::~Agent() { core_->Shutdown(); }

const std::string& Agent::name() const { return core_->options.name; }

std::vector<std::string> Agent::backend_names() const {
  std::vector<std::string> names;
  for (const auto& b : core_->backends) names.push_back(b->name());
  return names;
}

Result<Registration> Agent::RegisterMemory(const void* addr, uint64_t len, MemoryKind kind, int32_t device_id) {
  if (device_id < 0) return Err(StatusCode::kInvalidArgument, "device id {} is negative", device_id);
  if (kind == MemoryKind::kDevice &&
      std::none_of(core_->backends.begin(), core_->backends.end(),
                   [](const auto& b) { return b->capabilities().device_memory; })) {
    return Err(StatusCode::kFailedPrecondition,
               "agent {} cannot register {} memory: none of its backends moves device memory (tcp and "
               "local stage it through host memory when the agent has a DeviceCopier; ucx and "
               "libfabric take host memory only)",
               name(), MemoryName(kind, device_id));
  }
  uint64_t a = reinterpret_cast<uint64_t>(addr);
  TANDEM_ASSIGN_OR_RETURN(uint64_t id, core_->regions->Add(a, len, kind, device_id));
  RegionInfo info{id, a, len, kind, device_id};
  for (auto& b : core_->backends) {
    if (!b->capabilities().Supports(kind)) continue;
    auto blob = b->OnRegister(info);
    if (!blob.ok()) {
      core_->regions->Remove(id);
      return blob.status();
    }
    if (!blob->empty()) {
      std::lock_guard lock(core_->mu);
      core_->blobs[id][b->name()] = *blob;
    }
  }
  Registration reg;
  reg.core_ = core_;
  reg.id_ = id;
  reg.addr_ = a;
  reg.len_ = len;
  reg.device_id_ = device_id;
  return reg;
}

std::string Agent::ExportMetadata() const {
  AgentMetadata md;
  md.name = core_->options.name;
  md.instance_id = core_->instance;
  md.hostname = ThisHostname();
  md.boot_id = ThisBootId();
  md.process_id = ThisProcessId();
  for (const auto& b : core_->backends) md.backends[b->name()] = b->ConnectionInfo();
  std::lock_guard lock(core_->mu);
  for (const RegionInfo& r : core_->regions->List()) {
    RegionMetadata rm{r.addr, r.len, r.kind, r.device_id, {}};
    auto it = core_->blobs.find(r.id);
    if (it != core_->blobs.end()) rm.backend_info = it->second;
    md.regions.push_back(std::move(rm));
  }
  return EncodeMetadata(md);
}

Result<std::string> Agent::LoadPeerMetadata(std::string_view bytes) {
  TANDEM_ASSIGN_OR_RETURN(AgentMetadata md, DecodeMetadata(bytes));
  auto entry = std::make_shared<detail::PeerEntry>();
  entry->locality = LocalityOf(md);
  std::shared_ptr<const detail::PeerEntry> old;
  {
    std::lock_guard lock(core_->mu);
    auto it = core_->peers.find(md.name);
    if (it != core_->peers.end()) old = it->second;
  }
  if (old && old->md.instance_id != md.instance_id) {
    for (auto& b : core_->backends) b->InvalidatePeer(md.name);  // a restarted peer: drop the old one
  }
  for (auto& b : core_->backends) {
    if (!md.backends.count(b->name()) || !b->capabilities().Reaches(entry->locality)) continue;
    Status st = b->LoadPeer(md);
    if (!st.ok()) {
      log::warn("transfer agent {}: backend {} cannot load peer {}: {}", name(), b->name(), md.name, st.ToString());
      continue;
    }
    entry->backends.push_back(b->name());
  }
  std::string peer_name = md.name;
  entry->md = std::move(md);
  std::lock_guard lock(core_->mu);
  core_->peers[peer_name] = std::move(entry);
  return peer_name;
}

Status Agent::InvalidatePeer(const std::string& peer_name) {
  {
    std::lock_guard lock(core_->mu);
    if (!core_->peers.erase(peer_name)) return Err(StatusCode::kNotFound, "unknown peer {}", peer_name);
  }
  for (auto& b : core_->backends) b->InvalidatePeer(peer_name);
  return Status::Ok();
}

Result<std::string> Agent::BackendFor(const std::string& peer_name, MemoryKind kind) const {
  std::shared_ptr<const detail::PeerEntry> peer;
  {
    std::lock_guard lock(core_->mu);
    auto it = core_->peers.find(peer_name);
    if (it == core_->peers.end()) return Err(StatusCode::kNotFound, "unknown peer {}", peer_name);
    peer = it->second;
  }
  TANDEM_ASSIGN_OR_RETURN(Backend * b, core_->Choose(*peer, core_->options.backend_override, kind, kind));
  return b->name();
}

Result<std::string> Agent::DescribeBackend(MemoryKind kind, int32_t device_id) const {
  auto describe = [&](Locality locality) -> Result<std::string> {
    detail::PeerEntry everyone;  // a peer at `locality` offering every backend
    everyone.md.name = "<any>";
    everyone.locality = locality;
    for (const auto& b : core_->backends) everyone.backends.push_back(b->name());
    TANDEM_ASSIGN_OR_RETURN(Backend * b, core_->Choose(everyone, core_->options.backend_override, kind, kind));
    const BackendCapabilities caps = b->capabilities();
    if (kind == MemoryKind::kHost) return fmt::format("{} (host memory)", b->name());
    return fmt::format("{} ({}{})", b->name(), caps.device_staged ? "host staging for " : "",
                       MemoryName(kind, device_id));
  };
  auto node = describe(Locality::kSameNode);
  auto remote = describe(Locality::kRemote);
  if (!node.ok() && !remote.ok()) {
    return Err(StatusCode::kFailedPrecondition, "agent {} cannot move {} memory to another process: {}", name(),
               MemoryName(kind, device_id), node.status().message());
  }
  if (!remote.ok()) return fmt::format("{} on this node, none to other nodes", *node);
  if (!node.ok()) return fmt::format("{} to other nodes, none on this node", *remote);
  if (*node == *remote) return *node;
  return fmt::format("{} on this node, {} to other nodes", *node, *remote);
}

Result<TransferHandle> Agent::Post(Op op, const DescList& local, const DescList& remote, const std::string& peer_name,
                                   std::optional<std::string> notification, const PostOptions& options) {
  std::shared_ptr<const detail::PeerEntry> peer;
  {
    std::lock_guard lock(core_->mu);
    if (core_->shut_down) return Err(StatusCode::kFailedPrecondition, "agent {} is shut down", name());
    auto it = core_->peers.find(peer_name);
    if (it == core_->peers.end()) return Err(StatusCode::kNotFound, "unknown peer {}", peer_name);
    peer = it->second;
  }
  const std::string& forced = !options.backend.empty() ? options.backend : core_->options.backend_override;
  TANDEM_ASSIGN_OR_RETURN(Backend * backend, core_->Choose(*peer, forced, local.kind, remote.kind));

  // Validate and coalesce (coalesce.h); then pin our side so it stays registered until the end.
  std::vector<RegionInfo> remote_regions;
  for (const RegionMetadata& r : peer->md.regions) {
    remote_regions.push_back({remote_regions.size() + 1, r.addr, r.len, r.kind, r.device_id});
  }
  TANDEM_ASSIGN_OR_RETURN(std::vector<Segment> segments,
                          Coalesce(local, remote, core_->regions->List(), remote_regions));
  auto record = std::make_shared<TransferRecord>();
  record->on_done = options.on_done;
  // The segments, not the descriptors: each lies in one local region, and there are fewer.
  std::vector<Descriptor> pinned;
  pinned.reserve(segments.size());
  for (const Segment& s : segments) pinned.push_back({s.local_addr, s.len, s.local_device});
  TANDEM_ASSIGN_OR_RETURN(record->local_pin, core_->regions->Pin(local.kind, pinned));

  auto request = std::make_shared<TransferRequest>();
  request->id = core_->next_id.fetch_add(1);
  request->op = op;
  request->peer = peer_name;
  request->local_kind = local.kind;
  request->remote_kind = remote.kind;
  request->total_bytes = 0;  // the segments cover the descriptors exactly: fewer to add up
  for (const Segment& s : segments) request->total_bytes += s.len;
  request->segments = std::move(segments);
  request->notification = std::move(notification);
  request->while_computing = options.while_computing;
  record->start = std::chrono::steady_clock::now();
  request->deadline = record->start + options.timeout.value_or(core_->options.timeout);
  record->id = request->id;
  record->bytes = request->total_bytes;
  record->num_regions = request->segments.size();
  record->backend = backend->name();
  std::weak_ptr<AgentCore> weak = core_;
  request->on_complete = [weak, record](Status s) {
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - record->start).count();
    if (auto core = weak.lock()) core->Count(*record, s.ok(), seconds);  // before waiters wake
    FinishRecord(*record, std::move(s), seconds);
  };
  Status st = backend->Post(request);
  if (!st.ok()) return st;
  {
    std::lock_guard lock(core_->mu);
    core_->stats.num_descriptors += local.descs.size();
  }
  return TransferHandle(std::move(record));
}

std::vector<Notification> Agent::GetNotifications() {
  std::lock_guard lock(core_->mu);
  std::vector<Notification> out(std::make_move_iterator(core_->notifications.begin()),
                                std::make_move_iterator(core_->notifications.end()));
  core_->notifications.clear();
  return out;
}

TransferStats Agent::stats() const {
  std::lock_guard lock(core_->mu);
  return core_->stats;
}

}  // namespace tandem::transfer
