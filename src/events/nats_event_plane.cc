#include "events/nats_event_plane.h"

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>

#include <nats/nats.h>

#include "common/logging.h"

namespace tandem::runtime {
namespace {

std::string NatsError(natsStatus s) {
  const char* last = nats_GetLastError(nullptr);
  return last && *last ? last : natsStatus_GetText(s);
}

// Set by the connection's closed callback, the last one libnats delivers for it (on its callback
// thread, after the disconnected callback of the close). Heap-allocated: left behind if that
// callback does not come in time.
struct CloseLatch {
  std::mutex mu;
  std::condition_variable cv;
  bool closed = false;
};

void OnClosed(natsConnection*, void* closure) {
  auto* latch = static_cast<CloseLatch*>(closure);
  std::lock_guard<std::mutex> lock(latch->mu);
  latch->closed = true;
  latch->cv.notify_all();
}

// The connection, shared by the plane and its subscriptions (it outlives the last of them).
struct NatsConnection {
  std::string url;
  natsConnection* nc = nullptr;
  CloseLatch* latch = new CloseLatch;
  NatsConnection() = default;
  NatsConnection(const NatsConnection&) = delete;
  NatsConnection& operator=(const NatsConnection&) = delete;
  // Waits for the closed callback: until then libnats' thread may still be in OnDisconnected,
  // and at process exit that raced the destruction of the logger (TSan, test_events).
  ~NatsConnection() {
    if (!nc) {
      delete latch;  // never connected: no callback comes (natsConnection_Connect without retry)
      return;
    }
    natsConnection_Close(nc);
    bool closed = false;
    {
      std::unique_lock<std::mutex> lock(latch->mu);
      closed = latch->cv.wait_for(lock, std::chrono::seconds(5), [&] { return latch->closed; });
    }
    natsConnection_Destroy(nc);
    if (closed) {
      delete latch;
    } else {
      log::warn("event plane: {}: no closed callback from libnats within 5 s", url);
    }
  }
  Status Connected() const {
    const natsConnStatus s = natsConnection_Status(nc);
    if (s == NATS_CONN_STATUS_CONNECTED) return Status::Ok();
    return Err(StatusCode::kFailedPrecondition, "{}: not connected ({})", url,
               s == NATS_CONN_STATUS_RECONNECTING ? "the server went away; reconnecting"
               : s == NATS_CONN_STATUS_CLOSED     ? "closed"
                                                  : "disconnected");
  }
};

// libnats calls these on its own thread, possibly after the connection object is gone: no closure.
void OnDisconnected(natsConnection*, void*) { log::warn("event plane: NATS disconnected"); }
void OnReconnected(natsConnection*, void*) { log::info("event plane: NATS reconnected"); }

// What the delivery thread touches; freed by libnats' on-complete callback (after the last
// message callback), so it outlives the Subscription object.
struct SubscriptionState {
  std::mutex mu;
  bool closed = false;
  std::string subject;
  EventHandlers handlers;
  GapDetector detector;
};

void OnMessage(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  auto* state = static_cast<SubscriptionState*>(closure);
  auto event = DecodeEventFrame(state->subject, std::string_view(natsMsg_GetData(msg),
                                                                 natsMsg_GetDataLength(msg)));
  natsMsg_Destroy(msg);
  std::lock_guard<std::mutex> lock(state->mu);
  if (state->closed) return;
  if (!event.ok()) {
    log::warn("event plane: {}", event.status().ToString());
    return;
  }
  if (auto gap = state->detector.Check(*event); gap && state->handlers.on_gap) {
    state->handlers.on_gap(*gap);
  }
  state->handlers.on_event(*event);
}

void OnComplete(void* closure) { delete static_cast<SubscriptionState*>(closure); }

class NatsSubscription final : public Subscription {
 public:
  NatsSubscription(std::shared_ptr<NatsConnection> conn, natsSubscription* sub,
                   SubscriptionState* state)
      : conn_(std::move(conn)), sub_(sub), state_(state) {}
  ~NatsSubscription() override {
    {
      std::lock_guard<std::mutex> lock(state_->mu);  // waits for a handler call in progress
      state_->closed = true;
    }
    natsSubscription_Unsubscribe(sub_);
    natsSubscription_Destroy(sub_);  // state_ is freed by OnComplete
  }
  Status status() const override { return conn_->Connected(); }

 private:
  std::shared_ptr<NatsConnection> conn_;
  natsSubscription* sub_;
  SubscriptionState* state_;
};

class NatsEventPlane final : public EventPlane {
 public:
  NatsEventPlane(EventPlaneOptions options, std::shared_ptr<NatsConnection> conn)
      : options_(std::move(options)), conn_(std::move(conn)) {}

  Result<uint64_t> Publish(const std::string& subject, std::string_view payload) override {
    if (!ValidSubject(subject)) {
      return Err(StatusCode::kInvalidArgument, "event plane: bad subject '{}'", subject);
    }
    if (options_.worker_id.empty()) {
      return Status(StatusCode::kFailedPrecondition, "event plane: publishing needs a worker id");
    }
    // Under the lock: the wire order is the sequence order.
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t sequence = ++sequences_[subject];
    TANDEM_RETURN_IF_ERROR(conn_->Connected());
    const std::string frame = EncodeEventFrame(options_.worker_id, sequence, payload);
    const natsStatus s = natsConnection_Publish(conn_->nc, subject.c_str(), frame.data(),
                                                static_cast<int>(frame.size()));
    if (s != NATS_OK) {
      return Err(StatusCode::kFailedPrecondition, "{}: publish on {}: {}", conn_->url, subject,
                 NatsError(s));
    }
    return sequence;
  }

  Result<std::unique_ptr<Subscription>> Subscribe(const std::string& subject,
                                                  EventHandlers handlers) override {
    if (!ValidSubject(subject) || !handlers.on_event) {
      return Err(StatusCode::kInvalidArgument, "event plane: bad subject '{}' or no on_event",
                 subject);
    }
    TANDEM_RETURN_IF_ERROR(conn_->Connected());
    auto* state = new SubscriptionState;
    state->subject = subject;
    state->handlers = std::move(handlers);
    natsSubscription* sub = nullptr;
    natsStatus s = natsConnection_Subscribe(&sub, conn_->nc, subject.c_str(), OnMessage, state);
    if (s == NATS_OK) s = natsSubscription_SetOnCompleteCB(sub, OnComplete, state);
    if (s != NATS_OK) {
      if (sub) natsSubscription_Destroy(sub);
      delete state;
      return Err(StatusCode::kFailedPrecondition, "{}: subscribe to {}: {}", conn_->url, subject,
                 NatsError(s));
    }
    auto subscription = std::make_unique<NatsSubscription>(conn_, sub, state);
    s = natsConnection_FlushTimeout(conn_->nc, options_.timeout.count());
    if (s != NATS_OK) {
      return Err(StatusCode::kFailedPrecondition, "{}: subscribe to {}: {}", conn_->url, subject,
                 NatsError(s));
    }
    return std::unique_ptr<Subscription>(std::move(subscription));
  }

  Status Flush(std::chrono::milliseconds timeout) override {
    const natsStatus s = natsConnection_FlushTimeout(conn_->nc, timeout.count());
    if (s != NATS_OK) return Err(StatusCode::kFailedPrecondition, "{}: flush: {}", conn_->url, NatsError(s));
    return Status::Ok();
  }
  std::string url() const override { return conn_->url; }

 private:
  EventPlaneOptions options_;
  std::shared_ptr<NatsConnection> conn_;
  std::mutex mu_;
  std::map<std::string, uint64_t> sequences_;
};

}  // namespace

Result<std::unique_ptr<EventPlane>> MakeNatsEventPlane(EventPlaneOptions options) {
  auto conn = std::make_shared<NatsConnection>();
  conn->url = options.url;
  if (conn->url.find(':', 7) == std::string::npos) conn->url += ":4222";
  natsOptions* opts = nullptr;
  natsStatus s = natsOptions_Create(&opts);
  if (s == NATS_OK) s = natsOptions_SetURL(opts, conn->url.c_str());
  if (s == NATS_OK) s = natsOptions_SetTimeout(opts, options.timeout.count());
  if (s == NATS_OK) s = natsOptions_SetAllowReconnect(opts, true);
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(opts, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(opts, 250);
  if (s == NATS_OK) s = natsOptions_SetDisconnectedCB(opts, OnDisconnected, nullptr);
  if (s == NATS_OK) s = natsOptions_SetReconnectedCB(opts, OnReconnected, nullptr);
  if (s == NATS_OK) s = natsOptions_SetClosedCB(opts, OnClosed, conn->latch);
  if (s == NATS_OK) s = natsConnection_Connect(&conn->nc, opts);
  const std::string error = s == NATS_OK ? "" : NatsError(s);
  natsOptions_Destroy(opts);
  if (s != NATS_OK) {
    conn->nc = nullptr;
    return Err(StatusCode::kFailedPrecondition, "{}: cannot connect: {}", conn->url, error);
  }
  return std::unique_ptr<EventPlane>(
      std::make_unique<NatsEventPlane>(std::move(options), std::move(conn)));
}

}  // namespace tandem::runtime
