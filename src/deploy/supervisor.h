// The process supervisor behind `tandem serve` and `tandem run`: runs every component of a graph
// (graph.h) as a child process of the tandem binary, watches them, restarts the ones that die and
// stops them all on a shutdown signal.
//
//   start    every worker, then the frontend (fork + exec of the tandem binary; the child gets
//            PR_SET_PDEATHSIG=SIGKILL, its own process group, stdin /dev/null, an empty signal mask).
//   output   each child's stdout and stderr go through a pipe to a reader thread that writes them,
//            line by line, to the supervisor's stderr as "[decode-0] <line>" (and, with log_dir,
//            also unprefixed to <log_dir>/<component>.log).
//   ready    a worker once discovery lists <namespace>/<mode>/<instance_id> with its pid; the
//            frontend once GET http://host:port/health answers 200 (it needs a live worker). The
//            graph is up when every component is ready; not within startup_timeout_s: an error.
//   restart  any exit the supervisor did not ask for (a crash, a signal, even exit 0) restarts the
//            component after backoff_ms * 2^(restarts in a row), capped at max_backoff_ms. More than
//            max_restarts in a row (the count resets once it stays ready reset_after_s), or exit
//            2 (usage error) / 127 (exec failed) before it was ever ready: an error.
//   stop     SIGINT, SIGTERM or SIGHUP (or RequestStop): SIGTERM to every child, SIGKILL to the
//            process groups still there after shutdown_grace_s, every child reaped. On an error the
//            same stop runs before Run returns.
//   scale    SetReplicas (the planner's local connector, deploy/local_connector.h) changes the
//            replica count of a graph's prefill or decode group while it runs: new replicas start
//            as at startup (the lowest free replica index: name, instance id, port, device); the
//            highest-indexed ones go first on a scale-down: SIGTERM, and the worker leaves
//            discovery and lets its requests finish (--drain-timeout-s, from the graph's planner
//            section); it is not restarted, and SIGKILLed only drain_timeout_s + shutdown_grace_s
//            after the SIGTERM.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "deploy/graph.h"

namespace tandem::runtime {

class Discovery;

struct SupervisorOptions {
  std::string binary;         // the tandem binary; empty: this process's own (/proc/self/exe)
  std::string log_dir;        // non-empty: also write each component's output to <dir>/<name>.log
  std::string discovery_dir;  // empty: DefaultDiscoveryDir(); else also TANDEM_DISCOVERY_DIR of
                              // every child
  int output_fd = 2;          // where the prefixed lines go
  std::chrono::milliseconds health_interval{200};  // between readiness checks of one component
  std::function<void()> on_ready;  // called once on Run's thread when the graph is first up
};

class Supervisor {
 public:
  explicit Supervisor(Graph graph, SupervisorOptions options = {});
  ~Supervisor();  // SIGKILLs and reaps any child still running (Run normally leaves none)

  // Runs the graph until a shutdown signal or RequestStop (OK), or until a component cannot be
  // started, made ready in time or kept running (FailedPrecondition, naming the component and its
  // last exit; InvalidArgument for a graph that fails ValidateGraph). Blocks SIGINT, SIGTERM and SIGHUP
  // in the calling thread while it runs: call it from the main thread before other threads
  // start, so that the signals reach it. A frontend port of 0 becomes a free port first.
  Status Run();

  // Thread-safe: makes Run stop every component and return OK.
  void RequestStop() { stop_requested_ = true; }

  // Thread-safe: the replica count Run moves `mode`'s group to ("prefill" or "decode" of a graph
  // with a planner section; InvalidArgument for another mode, a graph without a planner, or a
  // count outside [0, the group's largest size: the planner's maximum]).
  Status SetReplicas(const std::string& mode, int count);
  // Thread-safe: the count asked for last (the graph's own before any SetReplicas), starting and
  // ready replicas alike; draining ones are not counted. -1 for a mode that cannot scale.
  int Replicas(const std::string& mode) const;

  // The frontend's port (after Run picked one for port 0).
  int frontend_port() const { return graph_.frontend.port; }

 private:
  struct Child;
  Status Spawn(Child& child);
  void Reap(Child& child, int wait_status);
  bool CheckReady(Child& child);
  void StopAll();
  void Reconcile();  // starts and drains replicas toward desired_

  Graph graph_;
  SupervisorOptions options_;
  std::unique_ptr<Discovery> discovery_;
  std::vector<std::unique_ptr<Child>> children_;
  std::atomic<bool> stop_requested_{false};
  mutable std::mutex mu_;
  std::map<std::string, int> desired_;  // scalable modes -> replicas asked for
};

}  // namespace tandem::runtime
