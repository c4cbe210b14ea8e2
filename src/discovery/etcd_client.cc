#include "discovery/etcd_client.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

namespace tandem::runtime {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int64_t JsonInt(const nlohmann::json& j, const char* key) {
  // The gateway writes int64 fields as strings and leaves out zero values.
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (it->is_string()) return std::stoll(it->get<std::string>());
  if (it->is_number_integer()) return it->get<int64_t>();
  return 0;
}

}  // namespace

std::string Base64Encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int s : {18, 12, 6, 0}) out += kBase64[(v >> s) & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = uint8_t(bytes[i]) << 16;
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    out += kBase64[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

Result<std::string> Base64Decode(const std::string& text) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const char* p = std::char_traits<char>::find(kBase64, 64, c);
    if (!p) return Err(StatusCode::kDataLoss, "bad base64 character '{}'", c);
    acc = (acc << 6) | static_cast<uint32_t>(p - kBase64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

std::string PrefixRangeEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<uint8_t>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<uint8_t>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

EtcdClient::EtcdClient(std::string host, int port, std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port), timeout_(timeout) {}

std::string EtcdClient::endpoint() const { return fmt::format("http://{}:{}", host_, port_); }

Result<nlohmann::json> EtcdClient::Call(const std::string& path, const nlohmann::json& body) const {
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::tcp_stream stream(ioc);
  beast::flat_buffer buffer;
  http::request<http::string_body> req{http::verb::post, path, 11};
  req.set(http::field::host, fmt::format("{}:{}", host_, port_));
  req.set(http::field::content_type, "application/json");
  req.set(http::field::connection, "close");
  req.body() = body.dump();
  req.prepare_payload();
  http::response<http::string_body> res;
  beast::error_code failure;
  const char* stage = "resolve";

  stream.expires_after(timeout_);  // one deadline for the whole call
  resolver.async_resolve(host_, std::to_string(port_), [&](beast::error_code ec,
                                                           tcp::resolver::results_type results) {
    if (ec) { failure = ec; return; }
    stage = "connect";
    stream.async_connect(results, [&](beast::error_code ec, const tcp::endpoint&) {
      if (ec) { failure = ec; return; }
      stage = "send";
      http::async_write(stream, req, [&](beast::error_code ec, size_t) {
        if (ec) { failure = ec; return; }
        stage = "read the reply";
        http::async_read(stream, buffer, res, [&](beast::error_code ec, size_t) { failure = ec; });
      });
    });
  });
  // The resolver has no deadline of its own: run_for bounds it too.
  ioc.run_for(timeout_ + std::chrono::milliseconds(100));
  if (!ioc.stopped()) {
    stream.close();
    ioc.restart();
    ioc.run_for(std::chrono::milliseconds(100));
    return Err(StatusCode::kFailedPrecondition, "etcd at {}: no answer within {} ms ({})", endpoint(),
               timeout_.count(), stage);
  }
  if (failure) {
    return Err(StatusCode::kFailedPrecondition, "etcd at {} unreachable: {}: {}", endpoint(), stage,
               failure == beast::error::timeout ? std::string("timed out") : failure.message());
  }
  nlohmann::json reply = nlohmann::json::parse(res.body(), nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded()) {
    return Err(StatusCode::kFailedPrecondition, "etcd at {}: {} {}: not JSON: {:.200}", endpoint(),
               path, res.result_int(), res.body());
  }
  if (res.result() != http::status::ok || reply.contains("error")) {
    const std::string message = reply.value("message", reply.value("error", res.body()));
    return Err(StatusCode::kFailedPrecondition, "etcd at {}: {}: {} (HTTP {})", endpoint(), path,
               message, res.result_int());
  }
  return reply;
}

Result<int64_t> EtcdClient::LeaseGrant(int64_t ttl_s) const {
  TANDEM_ASSIGN_OR_RETURN(auto reply, Call("/v3/lease/grant", {{"TTL", std::to_string(ttl_s)}}));
  const int64_t id = JsonInt(reply, "ID");
  if (id == 0) return Err(StatusCode::kFailedPrecondition, "etcd at {}: LeaseGrant gave no ID", endpoint());
  return id;
}

Result<int64_t> EtcdClient::LeaseKeepAliveOnce(int64_t lease_id) const {
  // A streaming RPC; the gateway answers one request with {"result": LeaseKeepAliveResponse}.
  TANDEM_ASSIGN_OR_RETURN(auto reply,
                          Call("/v3/lease/keepalive", {{"ID", std::to_string(lease_id)}}));
  const nlohmann::json& result = reply.contains("result") ? reply["result"] : reply;
  return JsonInt(result, "TTL");  // absent (0): the lease expired or was revoked
}

Status EtcdClient::LeaseRevoke(int64_t lease_id) const {
  auto reply = Call("/v3/lease/revoke", {{"ID", std::to_string(lease_id)}});
  if (!reply.ok() && reply.status().message().find("lease not found") != std::string::npos) {
    return Status::Ok();
  }
  return reply.status();
}

Result<bool> EtcdClient::PutIfAbsent(const std::string& key, const std::string& value,
                                     int64_t lease) const {
  const std::string k = Base64Encode(key);
  nlohmann::json txn = {
      {"compare",
       {{{"key", k}, {"result", "EQUAL"}, {"target", "CREATE"}, {"create_revision", "0"}}}},
      {"success",
       {{{"request_put",
          {{"key", k}, {"value", Base64Encode(value)}, {"lease", std::to_string(lease)}}}}}}};
  TANDEM_ASSIGN_OR_RETURN(auto reply, Call("/v3/kv/txn", txn));
  return reply.value("succeeded", false);
}

Result<std::vector<EtcdKeyValue>> EtcdClient::RangePrefix(const std::string& prefix) const {
  TANDEM_ASSIGN_OR_RETURN(
      auto reply, Call("/v3/kv/range", {{"key", Base64Encode(prefix)},
                                        {"range_end", Base64Encode(PrefixRangeEnd(prefix))},
                                        {"sort_order", "ASCEND"},
                                        {"sort_target", "KEY"}}));
  std::vector<EtcdKeyValue> out;
  for (const auto& kv : reply.value("kvs", nlohmann::json::array())) {
    EtcdKeyValue e;
    TANDEM_ASSIGN_OR_RETURN(e.key, Base64Decode(kv.value("key", std::string())));
    TANDEM_ASSIGN_OR_RETURN(e.value, Base64Decode(kv.value("value", std::string())));
    e.lease = JsonInt(kv, "lease");
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace tandem::runtime
