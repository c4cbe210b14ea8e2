// Transfer agent vocabulary (DESIGN.md section 4, the NIXL shape): memory kinds, operations,
// descriptors and transfer states. Addresses are virtual addresses in the owning process (host
// memory) or device pointers (device memory, with a device id); lengths are bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::transfer {

// Where a region lives. kDevice is GPU memory of `device_id` ("cuda:N"): tcp and local move it
// through the agent's DeviceCopier (device_copier.h); cuda_ipc copies it directly (same node).
enum class MemoryKind : uint8_t { kHost = 0, kDevice = 1 };

// kWrite: local -> remote (the prefill worker writes KV blocks into the decode worker).
// kRead: remote -> local.
enum class Op : uint8_t { kRead = 0, kWrite = 1 };

enum class TransferState { kInProgress, kDone, kError };

// How a peer relates to this agent; decides which backends can reach it.
enum class Locality : uint8_t { kSameProcess = 0, kSameNode = 1, kRemote = 2 };

const char* MemoryKindName(MemoryKind kind);
const char* OpName(Op op);
const char* LocalityName(Locality locality);

// One contiguous range: [addr, addr + len) on device `device_id` (0 for host memory).
struct Descriptor {
  uint64_t addr = 0;
  uint64_t len = 0;
  int32_t device_id = 0;
};

// A list of ranges of one memory kind. Post pairs local.descs[i] with remote.descs[i].
struct DescList {
  MemoryKind kind = MemoryKind::kHost;
  std::vector<Descriptor> descs;

  void Add(const void* addr, uint64_t len, int32_t device_id = 0) {
    descs.push_back({reinterpret_cast<uint64_t>(addr), len, device_id});
  }
  void Add(uint64_t addr, uint64_t len, int32_t device_id = 0) { descs.push_back({addr, len, device_id}); }
  uint64_t total_bytes() const {
    uint64_t n = 0;
    for (const auto& d : descs) n += d.len;
    return n;
  }
};

// A notification the target agent receives after the data of a transfer has landed.
struct Notification {
  std::string peer;     // the initiating agent's name
  std::string message;  // the initiator's message, as given to Post
};

}  // namespace tandem::transfer
