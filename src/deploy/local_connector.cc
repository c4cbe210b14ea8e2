#include "deploy/local_connector.h"

#include "common/file_util.h"
#include "common/logging.h"
#include "deploy/supervisor.h"
#include "frontend/http_server.h"
#include "planner/http_get.h"
#include "planner/predictor.h"
#include "planner/profile.h"

namespace tandem::runtime {

Result<planner::RoleCounts> LocalConnector::Current() {
  return planner::RoleCounts{supervisor_->Replicas("prefill"), supervisor_->Replicas("decode")};
}

Status LocalConnector::Apply(const planner::RoleCounts& want) {
  TANDEM_RETURN_IF_ERROR(supervisor_->SetReplicas("prefill", want.prefill));
  return supervisor_->SetReplicas("decode", want.decode);
}

Result<std::unique_ptr<LocalPlanner>> LocalPlanner::Create(const Graph& graph, Supervisor* supervisor) {
  const GraphPlanner& gp = graph.planner;
  auto text = ReadFile(gp.profile);
  if (!text.ok()) return Err(text.status().code(), "planner profile {}: {}", gp.profile, text.status().message());
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) return Err(StatusCode::kInvalidArgument, "planner profile {}: not JSON", gp.profile);
  auto profile = planner::ProfileFromJson(j);
  if (!profile.ok()) return Err(StatusCode::kInvalidArgument, "planner profile {}: {}", gp.profile,
                                profile.status().message());
  planner::PlannerConfig c;
  c.ttft_ms = gp.ttft_ms;
  c.itl_ms = gp.itl_ms;
  c.interval_s = gp.interval_s;
  c.min_prefill = gp.min_prefill;
  c.max_prefill = gp.max_prefill;
  c.min_decode = gp.min_decode;
  c.max_decode = gp.max_decode;
  c.budget = gp.budget;
  TANDEM_ASSIGN_OR_RETURN(c.predictor, planner::ParsePredictorKind(gp.predictor));
  c.scale_down_intervals = gp.scale_down_intervals;
  c.cooldown_s = gp.cooldown_s;
  c.correction.enabled = gp.correction;
  c.correction.local_prefill_tokens = DecodeLocalPrefillTokens(graph);
  TANDEM_ASSIGN_OR_RETURN(planner::ReplicaPlanner rp, planner::ReplicaPlanner::Create(c, std::move(*profile)));

  std::unique_ptr<LocalPlanner> p(new LocalPlanner());
  p->connector_ = std::make_unique<LocalConnector>(supervisor);
  // Where the frontend is asked (a wildcard listen address becomes loopback), as the supervisor's
  // readiness check asks it.
  const std::string host = ExpandGraph(graph).back().host;
  planner::PlannerLoopOptions o;
  o.interval_s = gp.interval_s;
  o.scrape = [host, supervisor]() {
    return planner::HttpGet(host, supervisor->frontend_port(), "/metrics", std::chrono::milliseconds(5000));
  };
  p->loop_ = std::make_unique<planner::PlannerLoop>(std::move(rp), p->connector_.get(), std::move(o), &p->registry_);
  p->metrics_host_ = graph.frontend.host;
  p->metrics_port_ = gp.metrics_port;
  return p;
}

LocalPlanner::~LocalPlanner() { Stop(); }

Status LocalPlanner::Start() {
  if (metrics_port_ > 0 && !metrics_server_) {
    http::HttpServer::Options o;
    o.host = metrics_host_;
    o.port = metrics_port_;
    o.num_threads = 1;
    auto server = std::make_unique<http::HttpServer>(o);
    metrics::Registry* r = &registry_;
    server->Route("GET", "/metrics", [r](const http::Request&, http::ResponseWriter& w)
                                         -> boost::asio::awaitable<void> {
      co_await w.WriteFull(200, metrics::kTextContentType, r->RenderText());
    });
    if (Status st = server->Start(); !st.ok()) {
      return Err(StatusCode::kFailedPrecondition, "planner metrics on port {}: {}", metrics_port_, st.message());
    }
    log::info("planner: metrics on http://{}:{}/metrics", metrics_host_, server->port());
    metrics_server_ = std::move(server);
  }
  loop_->Start();
  return Status::Ok();
}

void LocalPlanner::Stop() {
  if (loop_) loop_->Stop();
  if (metrics_server_) metrics_server_->Stop();
}

}  // namespace tandem::runtime
