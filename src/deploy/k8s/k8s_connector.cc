#include "deploy/k8s/k8s_connector.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <openssl/ssl.h>

#include <cstdlib>

#include "common/file_util.h"
#include "common/logging.h"

namespace tandem::k8s {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

std::string ScalePath(const std::string& ns, const std::string& deployment) {
  return "/apis/apps/v1/namespaces/" + ns + "/deployments/" + deployment + "/scale";
}

Result<int> ScaleReplicas(const nlohmann::json& scale) {
  const auto spec = scale.find("spec");
  if (spec == scale.end() || !spec->is_object()) return Status(StatusCode::kInvalidArgument, "Scale without spec");
  const auto r = spec->find("replicas");
  if (r == spec->end()) return 0;  // omitted when 0 (omitempty)
  if (!r->is_number_integer() || r->get<int64_t>() < 0) {
    return Status(StatusCode::kInvalidArgument, "Scale spec.replicas is not an integer >= 0");
  }
  return static_cast<int>(r->get<int64_t>());
}

nlohmann::json ScaleUpdate(const nlohmann::json& scale, int replicas) {
  nlohmann::json out = scale;
  out.erase("status");
  out["spec"]["replicas"] = replicas;
  return out;
}

Result<std::unique_ptr<K8sConnector>> K8sConnector::Create(K8sConnectorOptions o) {
  if (o.prefill_deployment.empty() || o.decode_deployment.empty()) {
    return Status(StatusCode::kInvalidArgument, "kubernetes connector: the prefill and decode Deployment names are required");
  }
  if (o.api_host.empty()) {
    const char* h = std::getenv("KUBERNETES_SERVICE_HOST");
    if (h == nullptr || *h == '\0') {
      return Status(StatusCode::kInvalidArgument, "kubernetes connector: no API server (KUBERNETES_SERVICE_HOST is "
                    "not set: not in a pod? give --k8s-api-server)");
    }
    o.api_host = h;
  }
  if (o.api_port == 0) {
    const char* p = std::getenv("KUBERNETES_SERVICE_PORT");
    o.api_port = p && *p ? std::atoi(p) : 443;
  }
  if (o.namespace_name.empty()) {
    auto ns = ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace");
    if (!ns.ok() || ns->empty()) {
      return Status(StatusCode::kInvalidArgument, "kubernetes connector: no namespace given and none in the pod's "
                    "service account");
    }
    o.namespace_name = *ns;
  }
  return std::unique_ptr<K8sConnector>(new K8sConnector(std::move(o)));
}

Result<std::pair<int, std::string>> K8sConnector::Call(const std::string& method, const std::string& target,
                                                       const std::string& body) {
  auto token = ReadFile(o_.token_file);  // re-read: the kubelet rotates it
  if (!token.ok()) return Err(StatusCode::kFailedPrecondition, "service account token: {}", token.status().message());
  while (!token->empty() && (token->back() == '\n' || token->back() == '\r')) token->pop_back();
  asio::io_context io;
  asio::ssl::context tls(asio::ssl::context::tls_client);
  beast::error_code ec;
  tls.load_verify_file(o_.ca_file, ec);
  if (ec) return Err(StatusCode::kFailedPrecondition, "CA bundle {}: {}", o_.ca_file, ec.message());
  tls.set_verify_mode(asio::ssl::verify_peer);
  beast::ssl_stream<beast::tcp_stream> stream(io, tls);
  // SNI and the certificate's name: the host we asked for.
  SSL_set_tlsext_host_name(stream.native_handle(), o_.api_host.c_str());
  stream.set_verify_callback(asio::ssl::host_name_verification(o_.api_host));
  asio::ip::tcp::resolver resolver(io);
  auto addrs = resolver.resolve(o_.api_host, std::to_string(o_.api_port), ec);
  const auto where = fmt::format("{} https://{}:{}{}", method, o_.api_host, o_.api_port, target);
  if (ec) return Err(StatusCode::kFailedPrecondition, "{}: {}", where, ec.message());
  beast::get_lowest_layer(stream).expires_after(std::chrono::milliseconds(o_.timeout_ms));
  beast::get_lowest_layer(stream).connect(addrs, ec);
  if (!ec) stream.handshake(asio::ssl::stream_base::client, ec);
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, o_.api_host);
  req.set(http::field::authorization, "Bearer " + *token);
  req.set(http::field::accept, "application/json");
  req.set(http::field::user_agent, "tandem-planner");
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  if (!ec) http::write(stream, req, ec);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  if (!ec) http::read(stream, buffer, res, ec);
  if (ec) return Err(StatusCode::kFailedPrecondition, "{}: {}", where, ec.message());
  beast::error_code ignored;
  stream.shutdown(ignored);
  return std::make_pair(static_cast<int>(res.result_int()), std::move(res.body()));
}

Result<nlohmann::json> K8sConnector::GetScale(const std::string& deployment) {
  const std::string path = ScalePath(o_.namespace_name, deployment);
  TANDEM_ASSIGN_OR_RETURN(auto answer, Call("GET", path, ""));
  if (answer.first != 200) {
    return Err(StatusCode::kFailedPrecondition, "GET {}: HTTP {}: {}", path, answer.first, answer.second.substr(0, 300));
  }
  nlohmann::json j = nlohmann::json::parse(answer.second, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Err(StatusCode::kInternal, "GET {}: not a JSON object", path);
  return j;
}

Result<planner::RoleCounts> K8sConnector::Current() {
  TANDEM_ASSIGN_OR_RETURN(nlohmann::json p, GetScale(o_.prefill_deployment));
  TANDEM_ASSIGN_OR_RETURN(nlohmann::json d, GetScale(o_.decode_deployment));
  TANDEM_ASSIGN_OR_RETURN(int np, ScaleReplicas(p));
  TANDEM_ASSIGN_OR_RETURN(int nd, ScaleReplicas(d));
  return planner::RoleCounts{np, nd};
}

Status K8sConnector::SetScale(const std::string& deployment, int replicas) {
  TANDEM_ASSIGN_OR_RETURN(nlohmann::json scale, GetScale(deployment));
  TANDEM_ASSIGN_OR_RETURN(int now, ScaleReplicas(scale));
  if (now == replicas) return Status::Ok();
  const std::string path = ScalePath(o_.namespace_name, deployment);
  TANDEM_ASSIGN_OR_RETURN(auto answer, Call("PUT", path, ScaleUpdate(scale, replicas).dump()));
  if (answer.first == 409) {
    return Err(StatusCode::kFailedPrecondition, "PUT {}: 409 Conflict (changed since it was read; the next "
               "interval reads it again)", path);
  }
  if (answer.first != 200) {
    return Err(StatusCode::kFailedPrecondition, "PUT {}: HTTP {}: {}", path, answer.first, answer.second.substr(0, 300));
  }
  log::info("planner: {} scaled {} -> {}", deployment, now, replicas);
  return Status::Ok();
}

Status K8sConnector::Apply(const planner::RoleCounts& want) {
  TANDEM_RETURN_IF_ERROR(SetScale(o_.prefill_deployment, want.prefill));
  return SetScale(o_.decode_deployment, want.decode);
}

}  // namespace tandem::k8s
