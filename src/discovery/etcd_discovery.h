// Discovery on etcd (v3 API through its JSON gateway, etcd_client.h), for clusters.
//
//   key    = "<key_prefix><namespace>/<component>/<instance_id>"  (key_prefix default "tandem/")
//   value  = InstanceInfo as JSON (discovery.h ToJson)
//   Register  LeaseGrant(ttl) + a Txn that puts the key under the lease only if it does not
//             exist (a live key of another lease: FailedPrecondition), then a keep-alive thread
//             (LeaseKeepAlive every ttl/3). A process that dies stops the keep-alives and etcd
//             deletes the key when the lease expires: within ttl (etcd raises a TTL below its
//             minimum, 1.5 election timeouts: 1.5 s by default). Destroying the Lease revokes it
//             (the key goes at once). A lease etcd lost
//             (expired during an outage) is granted and put again by the keep-alive thread;
//             Lease::status() reports the last round's error meanwhile.
//   List      Range over "<key_prefix><namespace>/<component>/", sorted by key = by instance_id.
//   WatchComponent  polls List (Discovery's default); etcd's streamed Watch is not used, so a
//             change shows within the poll interval (500 ms default).
//
// Errors: every call to an unreachable etcd fails within `timeout` with FailedPrecondition
// naming the endpoint ("etcd at http://127.0.0.1:2379 unreachable: connect: Connection refused").
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "discovery/discovery.h"

namespace tandem::runtime {

struct EtcdDiscoveryOptions {
  std::string host = "127.0.0.1";
  int port = 2379;
  std::string key_prefix = "tandem/";
  std::chrono::seconds ttl{5};                   // lease TTL (whole seconds, >= 1)
  std::chrono::milliseconds timeout{2000};       // one HTTP call to etcd
};

// Checks that etcd answers (a Range of the prefix) so that a wrong endpoint fails at start.
Result<std::unique_ptr<Discovery>> MakeEtcdDiscovery(EtcdDiscoveryOptions options);

// From a `--discovery` value: "" or "file" (the embedded file discovery, DefaultDiscoveryDir()),
// "file:///abs/dir" (file discovery in that folder), "etcd://host:port" (etcd; port default
// 2379). InvalidArgument for anything else; etcd unreachable: FailedPrecondition naming it.
Result<std::unique_ptr<Discovery>> MakeDiscovery(const std::string& url);
// Only parses `url` (InvalidArgument as above); for option checks.
Status ValidateDiscoveryUrl(const std::string& url);
// Where a `--discovery` value points, for logs: "etcd http://127.0.0.1:2379", "files in /tmp/..".
std::string DescribeDiscovery(const std::string& url);

}  // namespace tandem::runtime
