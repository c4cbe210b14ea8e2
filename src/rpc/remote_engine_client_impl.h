// Internal to RemoteEngineClient (rpc/remote_engine_client.h): its state, shared by
// remote_engine_client.cc (workers, calls, the refresh thread) and remote_engine_client_wait.cc
// (Submit, and the requests waiting for a live worker).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "rpc/remote_engine_client.h"
#include "rpc/tandem.grpc.pb.h"

namespace tandem::runtime {
namespace remote_detail {

struct Worker {
  InstanceInfo instance;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Worker::Stub> stub;
  bool healthy = true;      // guarded by Impl::mu
  EngineClientStats stats;  // guarded by Impl::mu
  // When a call last found it gone (UNAVAILABLE); a Health poll started before it does not
  // count. Guarded by Impl::mu.
  std::chrono::steady_clock::time_point lost_at{};

  std::string Name() const { return instance.instance_id + " (" + instance.endpoint + ")"; }
};

// A call in flight, shared by the id map (for Cancel) and the reactor.
struct CallEntry {
  std::shared_ptr<grpc::ClientContext> context = std::make_shared<grpc::ClientContext>();
  std::atomic<bool> cancelled{false};
};

using SteadyClock = std::chrono::steady_clock;

// A request that found no live worker, waiting for one (RemoteEngineClientOptions::wait_for_worker).
struct Parked {
  GenerateRequest request;
  OutputCallback on_output;
  SteadyClock::time_point since, until;  // until: the wait's end (never past `deadline`)
  SteadyClock::time_point deadline;      // the request's own: Submit + request_timeout
  bool cancelled = false;                // guarded by Impl::mu
};

}  // namespace remote_detail

struct RemoteEngineClient::Impl {
  using Worker = remote_detail::Worker;
  using CallEntry = remote_detail::CallEntry;
  using Parked = remote_detail::Parked;
  using SteadyClock = remote_detail::SteadyClock;

  std::shared_ptr<Discovery> discovery;
  RemoteEngineClientOptions options;

  mutable std::mutex mu;
  std::condition_variable drained;
  std::vector<std::shared_ptr<Worker>> workers;  // sorted by instance_id
  size_t next = 0;                               // round-robin position
  std::unordered_map<std::string, std::shared_ptr<CallEntry>> calls;
  int num_active = 0;                            // reactors not yet done
  ServedModelInfo info;
  int last_num_workers = -1;

  // The refresh thread (started and stopped by RemoteEngineClient).
  std::mutex refresh_mu;
  std::condition_variable refresh_cv;
  bool refresh_stop = false;
  std::thread refresher;
  std::mutex refresh_serial;  // one Refresh at a time (the thread's and Refresh()'s)

  void Refresh();
  // A call to `w` failed with UNAVAILABLE: unhealthy until a later Health poll says otherwise.
  void MarkLost(const std::shared_ptr<Worker>& w);
  // Tells options.selector the healthy workers when they changed since the last time.
  void PublishLive();
  std::mutex live_mu;  // serializes PublishLive
  std::optional<std::vector<std::string>> published_live;  // guarded by live_mu
  Status Submit(const std::shared_ptr<Impl>& self, GenerateRequest request,
                OutputCallback on_output);
  // Sends `request` to a live worker, its Generate deadline at `deadline`. *no_worker (and the
  // "no worker available" error) when none is live; on_output is moved from only on success.
  Status TrySubmit(const std::shared_ptr<Impl>& self, const GenerateRequest& request,
                   OutputCallback& on_output, SteadyClock::time_point deadline, bool* no_worker);
  std::string NoWorkerMessage() const;

  // Requests waiting for a live worker, and the thread that sends them on or ends them.
  std::deque<std::shared_ptr<Parked>> parked;  // guarded by mu
  std::vector<std::shared_ptr<Parked>> dispatching;  // guarded by mu: being sent (Cancel marks them)
  std::condition_variable parked_cv;           // with mu: parked, health or waiter_stop changed
  bool waiter_stop = false;                    // guarded by mu
  bool parked_dirty = false;                   // guarded by mu: set with each parked_cv notify
  void WakeWaiter() {                          // with mu held
    parked_dirty = true;
    parked_cv.notify_all();
  }
  std::atomic<int> num_parked{0};
  bool refresh_now = false;                    // guarded by refresh_mu: a request was parked
  std::thread waiter;
  void RunWaiter(const std::shared_ptr<Impl>& self);
  // options.selector's worker among the healthy ones; null: none (round-robin).
  std::shared_ptr<Worker> Select(const GenerateRequest& request);

  // Workers whose last call ended after they left discovery: a reactor must not drop the last
  // reference to its channel inside gRPC's callback (destroying a channel from its own callback
  // thread over-releases its completion queue: "assertion failed: prior > 0", seen when a killed
  // worker left discovery before its streams failed). Released by the next Refresh.
  std::vector<std::shared_ptr<Worker>> retired;  // guarded by mu
  void Retire(std::shared_ptr<Worker> w) {
    std::lock_guard<std::mutex> lock(mu);
    retired.push_back(std::move(w));
  }

  void CallDone(const std::string& id, const CallEntry* entry, bool reactor_done) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = calls.find(id);
    if (it != calls.end() && it->second.get() == entry) calls.erase(it);
    if (reactor_done && --num_active == 0) drained.notify_all();
  }
};

namespace remote_detail {

// Starts one Worker.Generate stream to `worker` for `request` (its deadline at `deadline`); the
// reactor delivers the outputs and deletes itself. `entry` is already in owner->calls.
void StartGenerateCall(std::shared_ptr<RemoteEngineClient::Impl> owner, std::shared_ptr<Worker> worker,
                       std::shared_ptr<CallEntry> entry, const GenerateRequest& request,
                       OutputCallback on_output, SteadyClock::time_point deadline);

}  // namespace remote_detail
}  // namespace tandem::runtime
