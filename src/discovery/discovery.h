// Discovery: which components (workers, frontends) exist, in the shape of etcd.
//
//   key    = "<namespace>/<component>/<instance_id>"   value = InstanceInfo (JSON)
//   Register -> a Lease with a TTL that keeps itself alive (a heartbeat thread); the key lives as
//   long as the lease: destroying the Lease deletes it, and a process that dies stops the heartbeat
//   so the key expires within the TTL.
//   List(namespace, component) -> the live instances (a prefix read).
//
// Implementations: the embedded default, a directory of JSON files (file_discovery.h); etcd comes
// later behind the same interface. Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::runtime {

// Component names used by tandem.
inline constexpr char kComponentAgg[] = "agg";
inline constexpr char kComponentPrefill[] = "prefill";
inline constexpr char kComponentDecode[] = "decode";
inline constexpr char kComponentFrontend[] = "frontend";

struct InstanceInfo {
  std::string namespace_name = "tandem";  // [A-Za-z0-9._-]+
  std::string component;                  // "agg", "prefill", "decode", "frontend"; same charset
  std::string instance_id;                // unique in (namespace, component); empty: generated
  std::string endpoint;                   // "host:port" of its gRPC server ("" for none)
  nlohmann::json metadata = nlohmann::json::object();  // e.g. model, max_model_len, vocab_size

  std::string key() const { return namespace_name + "/" + component + "/" + instance_id; }
};

// A namespace / component / instance id: [A-Za-z0-9._-]+, not "." or "..". Shared by every
// Discovery implementation (file and etcd).
bool ValidDiscoveryName(const std::string& s);
// A fresh random 12-hex-digit id (instance ids, temporary file names).
std::string NewInstanceId();

nlohmann::json ToJson(const InstanceInfo& info);
Result<InstanceInfo> InstanceFromJson(const nlohmann::json& j);

// A registration. Keeps its key alive until destroyed (then deletes it at once).
class Lease {
 public:
  virtual ~Lease() = default;
  virtual const InstanceInfo& info() const = 0;  // with instance_id filled in
  // The last heartbeat's result: OK while the key is being refreshed.
  virtual Status status() const = 0;
};

class Discovery {
 public:
  virtual ~Discovery() = default;
  // Errors: InvalidArgument (empty or bad namespace / component / instance_id), FailedPrecondition
  // (the key already belongs to a live lease, or the store cannot be written).
  virtual Result<std::unique_ptr<Lease>> Register(InstanceInfo info) = 0;
  // Live instances of one component, sorted by instance_id. An unreadable store is an error
  // (FailedPrecondition); a missing namespace is an empty list.
  virtual Result<std::vector<InstanceInfo>> List(const std::string& namespace_name,
                                                 const std::string& component) = 0;
  // Polls List every `interval` on a thread, calling `on_change` with the new list whenever it
  // differs from the last one (first call: the initial list). Stops when the handle is destroyed;
  // `on_change` is not called after that.
  class Watch {
   public:
    virtual ~Watch() = default;
  };
  virtual std::unique_ptr<Watch> WatchComponent(
      const std::string& namespace_name, const std::string& component,
      std::function<void(const std::vector<InstanceInfo>&)> on_change,
      std::chrono::milliseconds interval = std::chrono::milliseconds(500));
};

}  // namespace tandem::runtime
