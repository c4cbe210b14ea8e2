// The initiator side of the tcp backend: one ClientConn per data connection to a peer, with a
// sender thread (connects, says hello, writes requests and WRITE payloads straight from registered
// host memory, or staged from device memory) and a receiver thread (reads responses, READ payloads
// straight into registered host memory, or staged into device memory).
//
// A transfer may be split into stripes over several connections; it completes when every stripe
// has. Memory safety: a stripe is completed (and so its memory released to the caller) only by
// the thread that last touches its memory, and never while a thread still does.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transfer/backend.h"
#include "transfer/staging.h"
#include "transfer/tcp_wire.h"

namespace tandem::transfer::tcp {

class ClientConn;

// A transfer of the tcp backend: its request and the stripes still outstanding.
struct TcpTransfer {
  std::shared_ptr<TransferRequest> request;
  std::atomic<int> remaining{0};
  std::mutex mu;
  Status error;  // the first stripe error
  // Where the notification goes once every stripe landed, when it did not travel inline.
  std::weak_ptr<ClientConn> notify_conn;  // weak: connections belong to the backend
  bool notify_after = false;
};

struct Stripe {
  std::shared_ptr<TcpTransfer> parent;
  FrameType type = FrameType::kWrite;
  uint64_t wire_id = 0;  // echoed by the target
  std::vector<Segment> segments;
  std::string aux;  // inline notification (kWrite, flags) or the notification (kNotify)
  uint16_t flags = 0;
  uint64_t bytes = 0;
  // Guarded by the connection's mutex. The target's answer may arrive while the sender is still
  // inside SendStripe (in, or just out of, the send() of the last bytes): the receiver then
  // leaves the answer here and the sender finishes the stripe once it is out, so a transfer is
  // done only after no thread of ours touches its memory.
  bool in_send = false;
  bool answered = false;
  Status answer;
  std::atomic<bool> finished{false};
};

class ClientConn : public std::enable_shared_from_this<ClientConn> {
 public:
  struct Target {
    std::string host;
    uint16_t port = 0;
    std::string peer_name;
    std::string instance_id;  // the hello checks that the listener is still this instance
  };
  // `copier` (may be null: host memory only) stages this agent's device memory in chunks of
  // `staging_chunk_bytes`.
  ClientConn(Target target, std::string my_name, int connect_timeout_ms, DeviceCopier* copier = nullptr,
             uint64_t staging_chunk_bytes = kDefaultStagingChunkBytes);
  ~ClientConn();

  void Start();  // launches the sender thread (which connects lazily)
  // The connection's error (and the stripe untouched) when it is broken.
  Status Enqueue(std::shared_ptr<Stripe> stripe);
  // Ends the connection from outside: queued stripes fail now, in-flight ones as their threads
  // notice (promptly: the socket is shut down).
  void Break(Status why);
  void Join();
  bool broken() const;
  bool finished() const { return sender_done_.load() && receiver_done_.load(); }
  uint64_t outstanding_bytes() const { return outstanding_.load(); }

 private:
  enum class Who { kOutside, kSender, kReceiver };
  void BreakAs(Who who, Status why);
  void Finish(const std::shared_ptr<Stripe>& stripe, Status status);
  void SenderLoop();
  void ReceiverLoop();
  Status Handshake();
  Status SendStripe(const Stripe& stripe);
  // Error when a stripe on this connection is past its deadline or the connection broke.
  Status CheckDeadlines();

  const Target target_;
  const std::string my_name_;
  const int connect_timeout_ms_;
  DeviceCopier* const copier_;
  const uint64_t staging_chunk_;
  std::unique_ptr<Stager> send_stager_;  // the sender thread's (WRITE from device memory)
  std::unique_ptr<Stager> recv_stager_;  // the receiver thread's (READ into device memory)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  int fd_ = -1;
  bool broken_ = false;
  Status why_;
  std::deque<std::shared_ptr<Stripe>> queue_;     // not yet sent
  std::deque<std::shared_ptr<Stripe>> awaiting_;  // sent (or being sent), awaiting the response
  std::atomic<uint64_t> outstanding_{0};
  bool receiver_started_ = false;
  std::thread sender_, receiver_;
  std::atomic<bool> sender_done_{false}, receiver_done_{false};
};

// Completes a stripe; completes its transfer (or sends its notification) after the last one.
void StripeDone(const std::shared_ptr<Stripe>& stripe, const Status& status);
uint64_t NextWireId();

}  // namespace tandem::transfer::tcp
