// tandem planner: the SLA planner as its own process (issue 27), for deployments whose workers it
// cannot start itself: in Kubernetes it scales the prefill and decode Deployments through their
// scale subresource (deploy/k8s/k8s_connector.h); `tandem k8s render` renders it, with its
// ServiceAccount and RBAC, for a graph with a planner section. (Under `tandem serve` the planner
// runs inside serve instead: deploy/local_connector.h.) Every interval it reads the frontend's
// /metrics and decides (planner/planner_loop.h); its own /metrics on --metrics-port.
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/serve_options.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "deploy/graph.h"
#include "deploy/k8s/k8s_connector.h"
#include "frontend/http_server.h"
#include "planner/http_get.h"
#include "planner/planner_loop.h"
#include "planner/predictor.h"
#include "planner/profile.h"

namespace tandem::cli {
namespace {

struct PlannerOptions {
  std::string profile;
  planner::PlannerConfig config;
  std::string predictor = "constant";
  std::string frontend_url = "http://127.0.0.1:8000";
  std::string host = "0.0.0.0";
  int metrics_port = 9090;
  k8s::K8sConnectorOptions k8s;
  std::string api_server;  // host:port; empty: the pod's environment
};

int RunPlanner(PlannerOptions opt) {
  auto fail = [](const std::string& what) {
    std::fprintf(stderr, "tandem planner: %s\n", what.c_str());
    return 2;
  };
  auto text = ReadFile(opt.profile);
  if (!text.ok()) return fail("--profile: " + text.status().message());
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) return fail("--profile " + opt.profile + ": not JSON");
  auto profile = planner::ProfileFromJson(j);
  if (!profile.ok()) return fail("--profile " + opt.profile + ": " + profile.status().message());
  auto kind = planner::ParsePredictorKind(opt.predictor);
  if (!kind.ok()) return fail(kind.status().message());
  opt.config.predictor = *kind;
  auto rp = planner::ReplicaPlanner::Create(opt.config, std::move(*profile));
  if (!rp.ok()) return fail(rp.status().message());
  // http://host:port (the frontend Service)
  std::string rest = opt.frontend_url;
  if (rest.rfind("http://", 0) != 0) return fail("--frontend-url must be http://host:port");
  rest = rest.substr(7);
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  const std::string fe_host = colon == std::string::npos ? rest : rest.substr(0, colon);
  const int fe_port = colon == std::string::npos ? 80 : std::atoi(rest.c_str() + colon + 1);
  if (fe_host.empty() || fe_port <= 0 || fe_port > 65535) return fail("--frontend-url must be http://host:port");
  if (!opt.api_server.empty()) {
    const size_t c = opt.api_server.rfind(':');
    opt.k8s.api_host = opt.api_server.substr(0, c);
    opt.k8s.api_port = c == std::string::npos ? 443 : std::atoi(opt.api_server.c_str() + c + 1);
  }
  ShutdownSignals signals;  // before any thread starts
  auto connector = k8s::K8sConnector::Create(opt.k8s);
  if (!connector.ok()) return fail(connector.status().message());

  metrics::Registry registry;
  http::HttpServer::Options ho;
  ho.host = opt.host;
  ho.port = opt.metrics_port;
  ho.num_threads = 1;
  http::HttpServer server(ho);
  server.Route("GET", "/metrics", [&registry](const http::Request&, http::ResponseWriter& w)
                                      -> boost::asio::awaitable<void> {
    co_await w.WriteFull(200, metrics::kTextContentType, registry.RenderText());
  });
  server.Route("GET", "/health", [](const http::Request&, http::ResponseWriter& w) -> boost::asio::awaitable<void> {
    co_await w.WriteFull(200, "application/json", "{\"status\":\"ok\"}");
  });
  if (Status st = server.Start(); !st.ok()) return fail("metrics server: " + st.message());
  planner::PlannerLoopOptions lo;
  lo.interval_s = opt.config.interval_s;
  lo.scrape = [fe_host, fe_port] {
    return planner::HttpGet(fe_host, fe_port, "/metrics", std::chrono::milliseconds(5000));
  };
  planner::PlannerLoop loop(std::move(*rp), connector->get(), std::move(lo), &registry);
  log::info("planner: {} connector, frontend {}, every {} s; metrics on http://{}:{}/metrics",
            (*connector)->name(), opt.frontend_url, opt.config.interval_s, opt.host, server.port());
  loop.Start();
  log::info("planner: received signal {}, stopping", signals.Wait());
  loop.Stop();
  server.Stop();
  return 0;
}

}  // namespace

Runner RegisterPlanner(CLI::App& app) {
  auto opt = std::make_shared<PlannerOptions>();
  planner::PlannerConfig& c = opt->config;
  app.add_option("--profile", opt->profile, "`tandem profile`'s JSON for this model and device")->required();
  app.add_option("--ttft-ms", c.ttft_ms, "TTFT target (ms)")->check(CLI::PositiveNumber);
  app.add_option("--itl-ms", c.itl_ms, "ITL target (ms)")->check(CLI::PositiveNumber);
  app.add_option("--interval-s", c.interval_s, "One decision per interval (s)")->check(CLI::PositiveNumber);
  app.add_option("--prefill-min", c.min_prefill)->check(CLI::Range(0, 1024));
  app.add_option("--prefill-max", c.max_prefill)->check(CLI::Range(0, 1024));
  app.add_option("--decode-min", c.min_decode)->check(CLI::Range(0, 1024));
  app.add_option("--decode-max", c.max_decode)->check(CLI::Range(0, 1024));
  app.add_option("--budget", c.budget, "Workers in all (0: no limit beyond the maxima)")->check(CLI::Range(0, 2048));
  app.add_option("--predictor", opt->predictor, "constant | ewma | linear-trend")
      ->check(CLI::IsMember({"constant", "ewma", "linear-trend"}));
  app.add_option("--scale-down-intervals", c.scale_down_intervals)->check(CLI::Range(1, 1000));
  app.add_option("--cooldown-s", c.cooldown_s)->check(CLI::NonNegativeNumber);
  c.correction.local_prefill_tokens = runtime::kDefaultMaxLocalPrefillTokens;
  app.add_option("--local-prefill-tokens", c.correction.local_prefill_tokens,
                 "The decode workers' --max-local-prefill-tokens (their own prefills do not refine the prefill "
                 "profile)")->check(CLI::NonNegativeNumber);
  app.add_flag("!--no-correction", c.correction.enabled,
               "Use the profile as measured (default: refine it online from the observed TTFT and ITL)");
  app.add_option("--frontend-url", opt->frontend_url, "The frontend whose /metrics the planner reads");
  app.add_option("--host", opt->host, "Address of the planner's /metrics");
  app.add_option("--metrics-port", opt->metrics_port, "Port of the planner's /metrics and /health")
      ->check(CLI::Range(0, 65535));
  app.add_option("--prefill-deployment", opt->k8s.prefill_deployment, "The prefill workers' Deployment")->required();
  app.add_option("--decode-deployment", opt->k8s.decode_deployment, "The decode workers' Deployment")->required();
  app.add_option("--k8s-namespace", opt->k8s.namespace_name, "Their namespace (default: the pod's)");
  app.add_option("--k8s-api-server", opt->api_server,
                 "host:port of the API server (default: the pod's KUBERNETES_SERVICE_HOST/PORT)");
  app.add_option("--k8s-token-file", opt->k8s.token_file, "Service account token");
  app.add_option("--k8s-ca-file", opt->k8s.ca_file, "CA bundle of the API server");
  return [opt] { return RunPlanner(*opt); };
}

}  // namespace tandem::cli
