// The tcp backend's wire format and socket helpers.
//
// Every message is a 40-byte FrameHeader (host byte order: both ends are little-endian machines),
// then num_segments WireSegments, then aux_len bytes of aux (a name, a notification, an error
// message), then payload_len bytes of payload:
//   initiator -> target: kHello (aux "<name>\n<target instance id>"), kWrite (segments = remote
//     ranges of target_kind memory, aux = notification when flags & kHasNotification, payload =
//     the bytes), kRead (segments, target_kind), kNotify (aux = notification).
//   target -> initiator: kHelloOk, kAck, kError (status_code, aux = message), kReadData (payload).
// The target answers each request in order, so a connection's responses match its requests FIFO.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>

#include "common/status.h"

namespace tandem::transfer::tcp {

inline constexpr uint32_t kMagic = 0x46584454;  // "TDXF"
inline constexpr uint32_t kMaxSegments = 1u << 22;
inline constexpr uint32_t kMaxAux = 1u << 24;

enum class FrameType : uint8_t { kHello = 1, kHelloOk, kWrite, kRead, kNotify, kAck, kError, kReadData };
inline constexpr uint16_t kHasNotification = 1;

struct FrameHeader {
  uint32_t magic = kMagic;
  FrameType type = FrameType::kAck;
  uint8_t target_kind = 0;  // kWrite, kRead: the MemoryKind of the target's ranges (0 host, 1 device)
  uint16_t flags = 0;
  uint64_t xfer_id = 0;  // the stripe's id, echoed in the response
  uint32_t num_segments = 0;
  uint32_t aux_len = 0;
  uint64_t payload_len = 0;
  uint32_t status_code = 0;  // StatusCode of a kError
  uint32_t reserved1 = 0;
};
static_assert(sizeof(FrameHeader) == 40);

struct WireSegment {
  uint64_t addr = 0;
  uint64_t len = 0;
  int32_t device_id = 0;
  uint32_t reserved = 0;
};
static_assert(sizeof(WireSegment) == 24);

// Sockets block with a short timeout (the tick); on each tick without progress the callback runs
// with the number of consecutive idle ticks and may abort by returning an error.
inline constexpr int kTickMs = 20;
using Tick = std::function<Status(int idle_ticks)>;

Status SendAll(int fd, const void* data, uint64_t len, const Tick& tick);
Status RecvAll(int fd, void* data, uint64_t len, const Tick& tick);
// Reads and drops `len` bytes.
Status Discard(int fd, uint64_t len, const Tick& tick);

// Reads `count` elements into `out` (a std::vector of a trivially copyable type, or a
// std::string), replacing what it held, with RecvAll's waits and errors. It grows `out` as the
// bytes arrive, kRecvStepBytes at a time, so that a length the peer claims in a header costs
// memory only as far as the peer really sends (a 40-byte header claiming 2^22 segments no longer
// allocates 96 MiB up front). On an error `out` holds what had arrived, zero-padded to a step.
inline constexpr uint64_t kRecvStepBytes = 64 << 10;
template <typename Container>
Status RecvArray(int fd, Container* out, uint64_t count, const Tick& tick) {
  using T = typename Container::value_type;
  static_assert(std::is_trivially_copyable_v<T>);
  constexpr uint64_t kStep = kRecvStepBytes / sizeof(T) > 0 ? kRecvStepBytes / sizeof(T) : 1;
  out->clear();
  while (out->size() < count) {
    const size_t have = out->size();
    const size_t n = static_cast<size_t>(std::min<uint64_t>(count - have, kStep));
    out->resize(have + n);
    TANDEM_RETURN_IF_ERROR(RecvAll(fd, out->data() + have, n * sizeof(T), tick));
  }
  return Status::Ok();
}

// Options every data socket gets: TCP_NODELAY, the tick as SO_RCVTIMEO/SO_SNDTIMEO.
void SetSocketOptions(int fd);
// A listening socket on host:port (port 0: ephemeral); returns the fd and the bound port.
Result<int> Listen(const std::string& host, uint16_t port, uint16_t* bound_port);
// Connects within `timeout_ms`; `tick` may abort the wait.
Result<int> Connect(const std::string& host, uint16_t port, int timeout_ms, const Tick& tick);
// "host:port" -> parts.
Status ParseHostPort(const std::string& s, std::string* host, uint16_t* port);

}  // namespace tandem::transfer::tcp
