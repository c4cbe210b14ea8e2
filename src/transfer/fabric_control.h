// The control protocol of the RMA backends ("ucx", "libfabric"; fabric_rma.h runs it).
//
// The data of a transfer moves one-sided (RMA put/get on registered memory, remote keys from the
// agent metadata), but the target's CPU still guards its memory the way the tcp backend does
// (backend.h: the receiving side re-checks every range against its registrations and never lets
// memory outside a live registration be touched). So around the data phase:
//
//   initiator                                   target
//   kBegin {xfer, op, bounds, timeout} ------>  PinRegistered(bounds) (held until kEnd or expiry)
//               <------ kGrant {xfer, status}   (an error: nothing is pinned, no data may move)
//   RMA put/get of every segment, completed remotely (ucx: endpoint flush; libfabric: delivery
//   complete)
//   kEnd {xfer, status, notification} ------->  unpin; deliver the notification (status OK only)
//               <------ kAck {xfer}             (only when kEnd asked for it: a notification)
//   kPing {} ------------------------------->  ignored (liveness, see ControlType)
//
// A pushed READ (kPush in kBegin; libfabric, see RmaBackend::PushesReads): kBegin also carries the
// initiator's segments and its keys for them; the target writes its ranges into the initiator's
// memory and sends kGrant only once they landed (or failed). The initiator then never has an RMA
// operation of its own in flight for a READ.
//
// `bounds` are, per remote region the segments touch, the smallest range covering them: the target
// pins a registered region only if it contains that range, which is the same check as every segment
// (they all lie inside). A pin expires `timeout_ms` + kGuardGraceMs after kBegin, so an initiator
// that disappears cannot hold the target's deregistration longer than its own transfer deadline.
//
// Wire format (little-endian, as both ends): "TRMA", version u8 (kControlVersion), type u8, flags
// u16, xfer_id u64, status code u32, then length-prefixed (u32) strings and arrays:
//   status message, initiator name, initiator instance id, reply address (the initiator's backend
//   address, for replies: libfabric), target instance id, op u8, timeout_ms u32, notification,
//   bounds (u32 count, then {addr u64, len u64} each), push segments (u32 count, then {target_addr
//   u64, initiator_addr u64, len u64, key u32} each), keys (u32 count, then strings).
// Errors: Decode returns DataLoss for short, foreign or other-version messages.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "transfer/backend.h"

namespace tandem::transfer::rma {

inline constexpr uint8_t kControlVersion = 1;
inline constexpr int kGuardGraceMs = 1000;
// A notification longer than this is refused at Post (it travels in one control message).
inline constexpr size_t kMaxNotificationBytes = 16 << 10;
// The largest control message (libfabric posts receive buffers of this size).
inline constexpr size_t kMaxControlBytes = 64 << 10;

// kPing: ignored by the target; a transport sends it to find out that a peer it awaits an answer
// from is gone (libfabric: the send fails once the connection broke).
enum class ControlType : uint8_t { kBegin = 1, kGrant = 2, kEnd = 3, kAck = 4, kPing = 5 };
inline constexpr uint16_t kWantAck = 1;  // kEnd: answer with kAck after delivering
inline constexpr uint16_t kPush = 2;     // kBegin of a READ: the target writes the data (push)

// One segment of a pushed READ: the target's [target_addr, +len) goes to the initiator's
// initiator_addr, under keys[key] (the initiator's region blob of the backend).
struct PushSegment {
  uint64_t target_addr = 0;
  uint64_t initiator_addr = 0;
  uint64_t len = 0;
  uint32_t key = 0;
};

struct ControlMessage {
  ControlType type = ControlType::kBegin;
  uint16_t flags = 0;
  uint64_t xfer_id = 0;
  Status status;  // kGrant/kAck: the target's verdict; kEnd: the data phase's result
  std::string initiator;           // agent name
  std::string initiator_instance;  // with xfer_id: the target's key for the pin
  std::string reply_address;       // the initiator's backend address ("" when the transport replies itself)
  std::string target_instance;     // kBegin: the instance the initiator means (a restarted peer refuses)
  Op op = Op::kWrite;
  uint32_t timeout_ms = 0;
  std::optional<std::string> notification;  // kEnd
  std::vector<Descriptor> bounds;            // kBegin: host memory ranges of the target
  std::vector<PushSegment> push;             // kBegin with kPush
  std::vector<std::string> keys;             // kBegin with kPush
};

std::string EncodeControl(const ControlMessage& m);
Result<ControlMessage> DecodeControl(std::string_view bytes);

// The reply to `m` (same xfer id, instance ids and addresses), of `type` with `status`.
ControlMessage ReplyTo(const ControlMessage& m, ControlType type, Status status);

// The target's pins, keyed by (initiator instance, xfer id). Not thread-safe: the backend's progress
// thread owns it.
class GuardTable {
 public:
  explicit GuardTable(BackendHost& host) : host_(host) {}
  // kBegin: pins the bounds (host memory). The error when one lies outside every registration.
  Status Begin(const ControlMessage& m, std::chrono::steady_clock::time_point now);
  // kEnd: unpins. False when there was no pin (expired, or never granted).
  bool End(const ControlMessage& m);
  // Drops pins past their expiry; returns how many.
  size_t Expire(std::chrono::steady_clock::time_point now);
  void Clear() { pins_.clear(); }
  size_t size() const { return pins_.size(); }

 private:
  struct Guard {
    RegionPin pin;
    std::chrono::steady_clock::time_point expiry;
  };
  BackendHost& host_;
  std::map<std::pair<std::string, uint64_t>, Guard> pins_;
};

struct RegionSpan {
  uint64_t addr = 0;
  uint64_t len = 0;
};
// The index of a region containing [addr, +len) (trying `hint` first), or -1.
int FindSpan(const std::vector<RegionSpan>& regions, uint64_t addr, uint64_t len, int hint = -1);
// Per remote region the smallest range covering the segments inside it (their remote sides).
// InvalidArgument when a segment lies in no region.
Result<std::vector<Descriptor>> BoundsOf(const std::vector<Segment>& segments, const std::vector<RegionSpan>& regions);

}  // namespace tandem::transfer::rma
