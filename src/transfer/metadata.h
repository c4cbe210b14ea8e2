// Agent metadata: what a peer needs to reach this agent (NIXL's "local metadata"), exchanged out of
// band (request plane, discovery, a pipe in tests). Encoded as CBOR (RFC 8949) through
// nlohmann::json; opaque backend strings travel as CBOR byte strings.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "transfer/types.h"

namespace tandem::transfer {

struct RegionMetadata {
  uint64_t addr = 0;
  uint64_t len = 0;
  MemoryKind kind = MemoryKind::kHost;
  int32_t device_id = 0;
  // Per-backend opaque data for this region (a UCX rkey, a CUDA IPC handle); empty for tcp/local.
  std::map<std::string, std::string> backend_info;
};

struct AgentMetadata {
  std::string name;         // the agent's name (peers address it by this)
  std::string instance_id;  // unique per agent instance: a restarted peer has a new one
  std::string hostname;     // with boot_id: same node?
  std::string boot_id;
  std::string process_id;   // "<pid>-<random>": same process?
  // Backend name -> its connection info (tcp: "host:port"; local: the instance id).
  std::map<std::string, std::string> backends;
  std::vector<RegionMetadata> regions;
};

inline constexpr uint32_t kMetadataVersion = 1;

std::string EncodeMetadata(const AgentMetadata& md);
// Errors: DataLoss for bytes that are not CBOR or miss fields; InvalidArgument for another version.
Result<AgentMetadata> DecodeMetadata(std::string_view bytes);

// This process's identity, as written into metadata (recomputed after fork()).
std::string ThisProcessId();
std::string ThisHostname();
std::string ThisBootId();
// 128 random bits as hex.
std::string RandomId();

// The locality of `peer` relative to this process.
Locality LocalityOf(const AgentMetadata& peer);

}  // namespace tandem::transfer
