// The SLA planner under `tandem serve` (issue 27): LocalConnector scales a running graph's prefill
// and decode groups through its Supervisor (new worker processes; drained ones stopped), and
// LocalPlanner runs the planner loop (planner/planner_loop.h) over it once the graph is up, reading
// the graph's frontend /metrics every planner.interval_s, with the planner's own /metrics on
// planner.metrics_port when set.
#pragma once

#include <memory>
#include <string>

#include "common/metrics.h"
#include "common/status.h"
#include "deploy/graph.h"
#include "planner/planner_loop.h"

namespace tandem::http {
class HttpServer;
}

namespace tandem::runtime {

class Supervisor;

class LocalConnector : public planner::ScaleConnector {
 public:
  explicit LocalConnector(Supervisor* supervisor) : supervisor_(supervisor) {}
  std::string name() const override { return "local"; }
  Result<planner::RoleCounts> Current() override;
  Status Apply(const planner::RoleCounts& want) override;

 private:
  Supervisor* supervisor_;
};

class LocalPlanner {
 public:
  // Reads the graph's planner section and profile. InvalidArgument / NotFound naming the profile
  // file when it cannot be read or is not a profile.
  static Result<std::unique_ptr<LocalPlanner>> Create(const Graph& graph, Supervisor* supervisor);
  ~LocalPlanner();  // Stop()

  // Starts the loop (and the metrics server); call once the graph is up. FailedPrecondition when
  // the metrics port cannot be bound.
  Status Start();
  void Stop();

 private:
  LocalPlanner() = default;
  metrics::Registry registry_;
  std::unique_ptr<LocalConnector> connector_;
  std::unique_ptr<planner::PlannerLoop> loop_;
  std::unique_ptr<http::HttpServer> metrics_server_;
  std::string metrics_host_;
  int metrics_port_ = 0;
};

}  // namespace tandem::runtime
