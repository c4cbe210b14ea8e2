// The control path of the cuda_ipc backend (cuda_ipc_backend.h): pins and notifications over an
// abstract unix socket, one request/response at a time per connection.
//
// Every message is a 32-byte MsgHeader, then num_ranges WireRanges (24 bytes: addr, len, device
// id, reserved), then aux_len bytes of aux; both ends are processes of one host (host byte order).
//   initiator -> target: kHello (aux "<name>\n<target instance id>") and kBegin (xfer id, the remote
//     ranges), each answered; kEnd (xfer id, flags kSuccess / kHasNotification, aux = the
//     notification), not answered: the initiator sends it once its copies landed, and the target
//     releases the pin and delivers the notification when it reads it (as a NIXL notification,
//     it arrives after the data, not before the initiator's completion).
//   target -> initiator: kOk, or kError (status_code, aux = message), one per answered message,
//     in order.
// The sockets tick every 20 ms (tcp_wire.h's SendAll/RecvAll), so every wait can be abandoned.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "transfer/backend.h"

namespace tandem::transfer::ipc {

// "CIP2" (little-endian): this protocol, END not answered. The first one ("CIPC", END answered)
// is not spoken: a peer of it is refused as malformed, naming both (an older tandem build).
inline constexpr uint32_t kMagic = 0x32504943;
inline constexpr uint32_t kMagicV1 = 0x43504943;
inline constexpr uint32_t kMaxRanges = 1u << 22;
inline constexpr uint32_t kMaxAux = 1u << 24;

enum class MsgType : uint8_t { kHello = 1, kBegin, kEnd, kOk, kError };
inline constexpr uint16_t kSuccess = 1;
inline constexpr uint16_t kHasNotification = 2;

struct MsgHeader {
  uint32_t magic = kMagic;
  MsgType type = MsgType::kOk;
  uint8_t reserved0 = 0;
  uint16_t flags = 0;
  uint64_t xfer_id = 0;
  uint32_t num_ranges = 0;
  uint32_t aux_len = 0;
  uint32_t status_code = 0;
  uint32_t reserved1 = 0;
};
static_assert(sizeof(MsgHeader) == 32);

// "@tandem-cuda-ipc-<instance id>": the abstract socket an agent instance listens on.
std::string SocketName(const std::string& instance_id);

using Clock = std::chrono::steady_clock;

// The initiator's connection to one peer. Thread-safe: Calls serialize; a Send goes between them.
class ControlConn {
 public:
  // Connects and says hello. `spin_us`: how long a Call polls for its answer before it sleeps in
  // recv (0: not at all; a sleeping thread wakes some microseconds after the answer came). Errors:
  // NotFound when nothing listens (the peer is gone), FailedPrecondition when another instance
  // answers, Internal for socket errors and timeouts.
  static Result<std::shared_ptr<ControlConn>> Connect(const std::string& socket_name, const std::string& my_name,
                                                      const std::string& peer_name,
                                                      const std::string& peer_instance, Clock::time_point deadline,
                                                      const std::atomic<bool>& stopping, int spin_us = 0);
  ~ControlConn();

  // Sends one answered request (kHello, kBegin) and waits for its answer until `deadline`. The
  // target's kError comes back as its Status; a broken connection as NotFound "peer ... gone", a
  // deadline as Internal "timed out". Any error but the target's own breaks the connection.
  Status Call(MsgType type, uint64_t xfer_id, uint16_t flags, std::span<const Descriptor> ranges,
              const std::string& aux, Clock::time_point deadline, const std::atomic<bool>& stopping);
  // Sends one message that is not answered (kEnd); Ok once it is in the socket. Errors as Call's.
  Status Send(MsgType type, uint64_t xfer_id, uint16_t flags, const std::string& aux, Clock::time_point deadline,
              const std::atomic<bool>& stopping);
  // Ends the connection from outside: a Call in progress fails within a tick.
  void Break();
  bool broken() const { return broken_.load(); }

 private:
  ControlConn(int fd, std::string peer_name, int spin_us)
      : fd_(fd), peer_name_(std::move(peer_name)), spin_us_(spin_us) {}
  // A failed send or receive: the connection is broken; a closed one is NotFound "peer ... gone".
  Status Broke(Status st);
  // The wait of one Call or Send: ends it when stopping, broken or past `deadline` ("timed out
  // <what> peer ...").
  std::function<Status(int)> TickUntil(Clock::time_point deadline, const std::atomic<bool>& stopping,
                                       const char* what) const;
  // One whole message on the socket (under send_mu_).
  Status SendOne(MsgType type, uint64_t xfer_id, uint16_t flags, std::span<const Descriptor> ranges,
                 const std::string& aux, const std::function<Status(int)>& tick);
  int fd_;
  const std::string peer_name_;
  const int spin_us_;
  std::mutex call_mu_;  // one answered request at a time
  std::mutex send_mu_;  // whole messages on the socket
  std::atomic<bool> broken_{false};
};

// The target's side of one control connection: what ControlServer runs on each connection it
// accepted, in that connection's thread. Serves `fd` in the calling thread until it ends: reads
// the peer's kHello and answers kOk when its aux names `host`'s instance (else a kError,
// FailedPrecondition, naming this agent); then answers each kBegin (kOk when host.PinRegistered
// accepts its device ranges, the pin held until the kEnd of its xfer id or the end of the
// connection; else kError with the pin's Status) and reads each kEnd (not answered: releases that
// pin, delivers its notification to host.DeliverNotification when flags has both kSuccess and
// kHasNotification).
//
// `fd` is a connected stream socket whose waits tick (SO_RCVTIMEO / SO_SNDTIMEO of tcp::kTickMs,
// or non-blocking: every EAGAIN is a tick). `spin_us`: how long it polls for the next message
// after each one before it sleeps in recv (0: not at all). Returns when the peer closes, on a
// socket error, on a malformed message or one of another type (dropped without an answer; a peer
// of the first protocol is logged as a warning), when no hello arrived within 30 s or the peer
// stalls 30 s mid-message, or within a tick of `stopping` turning true; releases every pin it
// holds. Never closes or shuts down `fd`.
void ServeControlConnection(int fd, BackendHost& host, const std::atomic<bool>& stopping, int spin_us = 0);

// The target's side: accepts connections and serves BEGIN/END against the host's registrations
// (ServeControlConnection on a thread per connection).
class ControlServer {
 public:
  // Listens on SocketName(host.instance_id()). `spin_us`: how long a connection's thread polls
  // for the next message after each one before it sleeps in recv (0: not at all). Errors:
  // Internal when the socket cannot be bound.
  static Result<std::unique_ptr<ControlServer>> Start(BackendHost& host, int spin_us = 0);
  ~ControlServer();  // Stop()
  // Closes the listener and every connection (releasing their pins); joins the threads.
  void Stop();

 private:
  struct Conn;
  ControlServer(BackendHost& host, int listen_fd, int spin_us)
      : host_(host), listen_fd_(listen_fd), spin_us_(spin_us) {}
  void AcceptLoop();

  BackendHost& host_;
  const int listen_fd_;
  const int spin_us_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<std::shared_ptr<Conn>> conns_;
  std::thread acceptor_;
};

}  // namespace tandem::transfer::ipc
