// RemotePrefillClient: a decode worker's client of the prefill workers (Worker.RemotePrefill,
// tandem.proto) found in Discovery as <namespace>/prefill/* (serving the same model).
//
//   Prefill  picks a prefill worker and starts one unary call with the given deadline; `done`
//            runs exactly once on a gRPC thread, or at once on the caller's thread with
//            FailedPrecondition ("no prefill worker ...") when discovery lists none.
//            The worker: `prefill_worker_id` (the frontend router's choice, DESIGN.md section 1)
//            when it is one of the live workers this client sees (listed in discovery under
//            <namespace>/<component>, serving served_model_name); otherwise, and when it is empty,
//            the next live worker in round-robin order (a passed-over hint is logged at debug
//            level with the reason). A hint does not advance the round-robin position.
//            Call errors keep their meaning: UNAVAILABLE / DEADLINE_EXCEEDED / CANCELLED become
//            FailedPrecondition with a message naming the worker and the gRPC code.
//   Cancel   the request of a call in flight was cancelled: tells its prefill worker
//            (Worker.CancelRemotePrefill, 2 s deadline, not waited for) to stop computing it. The
//            call goes on and its `done` still comes, with the worker's answer: only that says
//            nothing more is written into the blocks. No call in flight for the id: nothing.
//   ~        cancels calls in flight and waits (up to 5 s) for their `done` (past that, its state
//            is leaked to the calls still running). Not from a gRPC callback (see Impl::Ended).
// Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "discovery/discovery.h"
#include "rpc/remote_prefill.h"

namespace tandem::runtime {

struct RemotePrefillClientOptions {
  std::string namespace_name = "tandem";
  std::string component = kComponentPrefill;
  std::string served_model_name;  // non-empty: only workers whose metadata "model" equals it
  std::chrono::milliseconds refresh_interval{500};  // discovery polling
};

class RemotePrefillClient {
 public:
  RemotePrefillClient(std::shared_ptr<Discovery> discovery, RemotePrefillClientOptions options);
  ~RemotePrefillClient();
  RemotePrefillClient(const RemotePrefillClient&) = delete;
  RemotePrefillClient& operator=(const RemotePrefillClient&) = delete;

  // `worker` (optional) receives the chosen worker's instance id. `prefill_worker_id`: the
  // preferred worker's instance id (empty: none).
  void Prefill(const RemotePrefillRequest& request, std::chrono::milliseconds timeout,
               RemotePrefillDone done, std::string* worker = nullptr,
               const std::string& prefill_worker_id = {});
  // See above. Thread-safe; does not block on the network.
  void Cancel(const std::string& request_id);
  // Whether `instance_id` is a live worker of this client now (what Prefill honours as a hint).
  bool HasWorker(const std::string& instance_id) const;
  int num_workers() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace tandem::runtime
