#include "discovery/etcd_discovery.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "common/logging.h"
#include "discovery/etcd_client.h"
#include "discovery/file_discovery.h"

namespace tandem::runtime {
namespace {

class EtcdLease final : public Lease {
 public:
  EtcdLease(std::shared_ptr<const EtcdClient> client, InstanceInfo info, std::string key,
            int64_t lease_id, std::chrono::seconds ttl)
      : client_(std::move(client)), info_(std::move(info)), key_(std::move(key)),
        lease_id_(lease_id), ttl_(ttl) {
    thread_ = std::thread([this] { KeepAlive(); });
  }
  ~EtcdLease() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    if (Status st = client_->LeaseRevoke(lease_id_); !st.ok()) {
      log::warn("discovery: revoking the lease of {}: {} (it expires within {} s)", info_.key(),
                st.ToString(), ttl_.count());
    }
  }
  const InstanceInfo& info() const override { return info_; }
  Status status() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  // One keep-alive round; a lost lease (expired while etcd was unreachable) is made again.
  Status Refresh() {
    TANDEM_ASSIGN_OR_RETURN(int64_t ttl_left, client_->LeaseKeepAliveOnce(lease_id_));
    if (ttl_left > 0) return Status::Ok();
    log::warn("discovery: the etcd lease of {} expired; registering again", info_.key());
    TANDEM_ASSIGN_OR_RETURN(int64_t id, client_->LeaseGrant(ttl_.count()));
    lease_id_ = id;
    TANDEM_ASSIGN_OR_RETURN(bool put, client_->PutIfAbsent(key_, ToJson(info_).dump(), id));
    if (!put) {
      return Err(StatusCode::kFailedPrecondition, "discovery: {} was taken by another process",
                 info_.key());
    }
    return Status::Ok();
  }

  void KeepAlive() {
    const auto period = std::max(std::chrono::milliseconds(100),
                                 std::chrono::duration_cast<std::chrono::milliseconds>(ttl_) / 3);
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
      lock.unlock();
      Status st = Refresh();
      lock.lock();
      if (!st.ok() && status_.ok()) log::warn("discovery: lease {}: {}", info_.key(), st.ToString());
      if (st.ok() && !status_.ok()) log::info("discovery: lease {} refreshed again", info_.key());
      status_ = st;
    }
  }

  const std::shared_ptr<const EtcdClient> client_;
  const InstanceInfo info_;
  const std::string key_;
  int64_t lease_id_;  // written by the keep-alive thread only (read after join)
  const std::chrono::seconds ttl_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  Status status_;
  std::thread thread_;
};

class EtcdDiscovery final : public Discovery {
 public:
  explicit EtcdDiscovery(EtcdDiscoveryOptions options)
      : options_(std::move(options)),
        client_(std::make_shared<EtcdClient>(options_.host, options_.port, options_.timeout)) {}

  Status Ping() { return client_->RangePrefix(options_.key_prefix + "/").status(); }

  Result<std::unique_ptr<Lease>> Register(InstanceInfo info) override {
    if (info.instance_id.empty()) info.instance_id = NewInstanceId();
    for (const std::string* s : {&info.namespace_name, &info.component, &info.instance_id}) {
      if (!ValidDiscoveryName(*s)) {
        return Err(StatusCode::kInvalidArgument,
                   "discovery: '{}' is not a valid name (letters, digits, '.', '_', '-')", *s);
      }
    }
    const std::string key = options_.key_prefix + info.key();
    TANDEM_ASSIGN_OR_RETURN(int64_t lease_id, client_->LeaseGrant(options_.ttl.count()));
    auto put = client_->PutIfAbsent(key, ToJson(info).dump(), lease_id);
    if (!put.ok() || !*put) {
      (void)client_->LeaseRevoke(lease_id);
      if (!put.ok()) return put.status();
      return Err(StatusCode::kFailedPrecondition, "discovery: {} is already registered in etcd at {}",
                 info.key(), client_->endpoint());
    }
    return std::unique_ptr<Lease>(
        std::make_unique<EtcdLease>(client_, std::move(info), key, lease_id, options_.ttl));
  }

  Result<std::vector<InstanceInfo>> List(const std::string& namespace_name,
                                         const std::string& component) override {
    if (!ValidDiscoveryName(namespace_name) || !ValidDiscoveryName(component)) {
      return Err(StatusCode::kInvalidArgument, "discovery: bad namespace or component '{}/{}'",
                 namespace_name, component);
    }
    TANDEM_ASSIGN_OR_RETURN(
        auto kvs, client_->RangePrefix(options_.key_prefix + namespace_name + "/" + component + "/"));
    std::vector<InstanceInfo> out;
    for (const EtcdKeyValue& kv : kvs) {
      auto info = InstanceFromJson(nlohmann::json::parse(kv.value, nullptr, false));
      if (!info.ok()) {
        log::warn("discovery: etcd key {}: {}", kv.key, info.status().ToString());
        continue;
      }
      out.push_back(std::move(info).value());
    }
    std::sort(out.begin(), out.end(), [](const InstanceInfo& a, const InstanceInfo& b) {
      return a.instance_id < b.instance_id;
    });
    return out;
  }

 private:
  EtcdDiscoveryOptions options_;
  std::shared_ptr<const EtcdClient> client_;
};

struct ParsedUrl {
  enum Kind { kFile, kEtcd } kind = kFile;
  std::string dir;  // file
  std::string host;
  int port = 2379;
};

Result<ParsedUrl> ParseDiscoveryUrl(const std::string& url) {
  ParsedUrl p;
  if (url.empty() || url == "file") return p;
  if (url.rfind("file://", 0) == 0) {
    p.dir = url.substr(7);
    if (p.dir.empty() || p.dir.front() != '/') {
      return Err(StatusCode::kInvalidArgument, "--discovery {}: file:// needs an absolute path", url);
    }
    return p;
  }
  if (url.rfind("etcd://", 0) == 0) {
    p.kind = ParsedUrl::kEtcd;
    std::string rest = url.substr(7);
    if (!rest.empty() && rest.back() == '/') rest.pop_back();
    const size_t colon = rest.rfind(':');
    p.host = colon == std::string::npos ? rest : rest.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string port = rest.substr(colon + 1);
      char* end = nullptr;
      const long v = std::strtol(port.c_str(), &end, 10);
      if (port.empty() || *end != '\0' || v < 1 || v > 65535) {
        return Err(StatusCode::kInvalidArgument, "--discovery {}: bad port '{}'", url, port);
      }
      p.port = static_cast<int>(v);
    }
    if (p.host.empty() || p.host.find('/') != std::string::npos) {
      return Err(StatusCode::kInvalidArgument, "--discovery {}: expected etcd://host:port", url);
    }
    return p;
  }
  return Err(StatusCode::kInvalidArgument,
             "--discovery {}: expected 'file', file:///dir or etcd://host:port", url);
}

}  // namespace

Result<std::unique_ptr<Discovery>> MakeEtcdDiscovery(EtcdDiscoveryOptions options) {
  if (options.ttl.count() < 1) options.ttl = std::chrono::seconds(1);
  auto discovery = std::make_unique<EtcdDiscovery>(std::move(options));
  TANDEM_RETURN_IF_ERROR(discovery->Ping());
  return std::unique_ptr<Discovery>(std::move(discovery));
}

Status ValidateDiscoveryUrl(const std::string& url) { return ParseDiscoveryUrl(url).status(); }

Result<std::unique_ptr<Discovery>> MakeDiscovery(const std::string& url) {
  TANDEM_ASSIGN_OR_RETURN(ParsedUrl p, ParseDiscoveryUrl(url));
  if (p.kind == ParsedUrl::kFile) return MakeFileDiscovery(FileDiscoveryOptions{p.dir});
  EtcdDiscoveryOptions options;
  options.host = p.host;
  options.port = p.port;
  return MakeEtcdDiscovery(std::move(options));
}

std::string DescribeDiscovery(const std::string& url) {
  auto p = ParseDiscoveryUrl(url);
  if (!p.ok()) return url;
  if (p->kind == ParsedUrl::kEtcd) return fmt::format("etcd http://{}:{}", p->host, p->port);
  return "files in " + (p->dir.empty() ? DefaultDiscoveryDir() : p->dir);
}

}  // namespace tandem::runtime
