// Internal to RemoteEngineClient (rpc/remote_engine_client.h): its state, shared by
// remote_engine_client.cc (workers, calls, the refresh thread) and remote_engine_client_wait.cc
// (Submit, and the requests waiting for a live worker).
#pragma once

#include <algorithm>
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
  Status Submit(GenerateRequest request, OutputCallback on_output);
  // Sends `request` to a live worker, its Generate deadline at `deadline`. *no_worker (and the
  // "no worker available" error) when none is live; on_output is moved from only on success.
  Status TrySubmit(const GenerateRequest& request, OutputCallback& on_output,
                   SteadyClock::time_point deadline, bool* no_worker);
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
  void RunWaiter();
  // options.selector's worker among the healthy ones; null: none (round-robin).
  std::shared_ptr<Worker> Select(const GenerateRequest& request);

  // A Generate call ended (its reactor is gone): takes the call's worker and entry, counts the
  // reactor out. The last reference to a channel must never be dropped on one of gRPC's callback
  // threads: gRPC 1.51 (no background poller) runs every callback on the "nexting" threads of one
  // process-wide completion queue, and a channel that was its last user shuts that queue down from
  // its destructor, joins those threads (the calling one too) and deletes the queue the calling
  // thread polls next ("assertion failed: prior > 0" in ref_counted.h, or a SIGSEGV in
  // nexting_thread). So the worker (its channel) and the entry (its ClientContext also holds the
  // channel) are dropped here under `mu` while `workers` still lists the worker (then neither is
  // the last reference: only Refresh unlists it), else parked in `retired` for the next Refresh or
  // ~Impl. The reactor holds a plain Impl*: the client's destructor waits for this call (or leaks
  // the Impl when calls outlive its wait), so Impl is never destroyed on a gRPC thread either.
  struct RetiredCall {
    std::shared_ptr<Worker> worker;
    std::shared_ptr<CallEntry> entry;
  };
  std::vector<RetiredCall> retired;  // guarded by mu
  void CallEnded(std::shared_ptr<Worker> w, std::shared_ptr<CallEntry> e) {
    std::lock_guard<std::mutex> lock(mu);
    const bool listed = std::find(workers.begin(), workers.end(), w) != workers.end();
    if (!listed) retired.push_back({std::move(w), std::move(e)});
    w.reset();
    e.reset();
    if (--num_active == 0) drained.notify_all();
  }

  // Ends the entry's listing (for Cancel and duplicate ids); the reactor still holds the entry.
  void CallDone(const std::string& id, const CallEntry* entry) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = calls.find(id);
    if (it != calls.end() && it->second.get() == entry) calls.erase(it);
  }
};

namespace remote_detail {

// Starts one Worker.Generate stream to `worker` for `request` (its deadline at `deadline`); the
// reactor delivers the outputs and deletes itself. `entry` is already in owner->calls.
void StartGenerateCall(RemoteEngineClient::Impl* owner, std::shared_ptr<Worker> worker,
                       std::shared_ptr<CallEntry> entry, const GenerateRequest& request,
                       OutputCallback on_output, SteadyClock::time_point deadline);

// Tests only (null otherwise): called on gRPC's thread as the very last step of every Generate
// call's OnDone, after the client was told the call ended (it touches nothing of the client).
inline std::atomic<void (*)()> after_call_ended_for_testing{nullptr};

}  // namespace remote_detail
}  // namespace tandem::runtime
