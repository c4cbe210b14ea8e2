// A small etcd v3 client over etcd's gRPC-JSON gateway (HTTP/1.1 POST of JSON to /v3/...), the
// calls discovery needs. Source: the etcd v3 API reference and "gRPC gateway" page
// (etcd.io/docs/v3.4/dev-guide/api_grpc_gateway/, api_reference_v3): keys and values travel
// base64-encoded, 64-bit integers as JSON strings; etcd 3.4 (Debian 12's etcd-server) serves the
// gateway on its client port under /v3/.
//
// Transport: Boost.Beast (already a dependency: no libcurl-dev needed), one short HTTP/1.1
// connection per call, every call bounded by `timeout` (connect + write + read). Errors: a
// Status naming the endpoint: FailedPrecondition when etcd cannot be reached, times out,
// answers no JSON or an etcd error ("etcd at http://H:P: <what>"). Thread-safe (no state
// beyond the options).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::runtime {

struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t lease = 0;  // 0: none
};

class EtcdClient {
 public:
  // `host`, `port`: etcd's client URL (e.g. 127.0.0.1, 2379).
  EtcdClient(std::string host, int port, std::chrono::milliseconds timeout);

  std::string endpoint() const;  // "http://host:port"

  // LeaseGrant: a lease of `ttl_s` seconds (etcd may round up); returns its ID.
  Result<int64_t> LeaseGrant(int64_t ttl_s) const;
  // LeaseKeepAlive (one round): the remaining TTL in seconds; 0 when the lease no longer exists.
  Result<int64_t> LeaseKeepAliveOnce(int64_t lease_id) const;
  // LeaseRevoke: deletes the lease and every key attached to it. A lease that is already gone is OK.
  Status LeaseRevoke(int64_t lease_id) const;
  // Txn: put `key` = `value` under `lease` only if the key does not exist (create_revision == 0).
  // Returns false when the key exists.
  Result<bool> PutIfAbsent(const std::string& key, const std::string& value, int64_t lease) const;
  // Range over every key that starts with `prefix`, sorted by key.
  Result<std::vector<EtcdKeyValue>> RangePrefix(const std::string& prefix) const;

  // One gateway call: POST `path` (e.g. "/v3/kv/range") with `body`; the parsed JSON reply.
  Result<nlohmann::json> Call(const std::string& path, const nlohmann::json& body) const;

 private:
  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
};

std::string Base64Encode(const std::string& bytes);
Result<std::string> Base64Decode(const std::string& text);
// The first key after every key that starts with `prefix` (etcd's range_end for a prefix).
std::string PrefixRangeEnd(const std::string& prefix);

}  // namespace tandem::runtime
