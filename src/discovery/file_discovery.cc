#include "discovery/file_discovery.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "common/logging.h"

namespace tandem::runtime {
namespace {

namespace fs = std::filesystem;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

// A process of this host that no longer runs: no such pid, or a zombie waiting to be reaped.
bool ProcessGone(int64_t pid) {
  if (pid <= 0) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

Status WriteAtomically(const fs::path& path, const std::string& text) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return Err(StatusCode::kFailedPrecondition, "cannot create {}: {}",
                     path.parent_path().string(), ec.message());
  const fs::path tmp = path.string() + fmt::format(".tmp.{}.{}", getpid(), NewInstanceId());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return Err(StatusCode::kFailedPrecondition, "cannot write {}", tmp.string());
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return Err(StatusCode::kFailedPrecondition, "cannot rename into {}", path.string());
  }
  return Status::Ok();
}

struct Entry {
  InstanceInfo info;
  int64_t pid = 0;
  std::string host;
  int64_t expires_at_ms = 0;
};

std::optional<Entry> ReadEntry(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  auto info = InstanceFromJson(j);
  if (!info.ok()) return std::nullopt;
  Entry e;
  e.info = std::move(info).value();
  e.pid = j.value("pid", int64_t{0});
  e.host = j.value("host", std::string());
  e.expires_at_ms = j.value("expires_at_ms", int64_t{0});
  return e;
}

class FileDiscovery;

class FileLease final : public Lease {
 public:
  FileLease(InstanceInfo info, fs::path path, FileDiscoveryOptions options)
      : info_(std::move(info)), path_(std::move(path)), options_(options) {}
  ~FileLease() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    std::error_code ec;
    fs::remove(path_, ec);
  }
  Status Write() {
    nlohmann::json j = ToJson(info_);
    j["pid"] = static_cast<int64_t>(getpid());
    j["host"] = HostName();
    j["expires_at_ms"] = NowMs() + options_.ttl.count();
    Status st = WriteAtomically(path_, j.dump());
    std::lock_guard<std::mutex> lock(mu_);
    if (!st.ok() && status_.ok()) log::warn("discovery: lease {}: {}", info_.key(), st.ToString());
    status_ = st;
    return st;
  }
  void Start() {
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, options_.refresh, [this] { return stop_; })) {
        lock.unlock();
        (void)Write();
        lock.lock();
      }
    });
  }
  const InstanceInfo& info() const override { return info_; }
  Status status() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  const InstanceInfo info_;
  const fs::path path_;
  const FileDiscoveryOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  Status status_;
  std::thread thread_;
};

class FileDiscovery final : public Discovery {
 public:
  explicit FileDiscovery(FileDiscoveryOptions options) : options_(std::move(options)) {
    if (options_.root.empty()) options_.root = DefaultDiscoveryDir();
    if (options_.refresh >= options_.ttl) options_.refresh = options_.ttl / 3;
    host_ = HostName();
  }

  Result<std::unique_ptr<Lease>> Register(InstanceInfo info) override {
    if (info.instance_id.empty()) info.instance_id = NewInstanceId();
    for (const std::string* s : {&info.namespace_name, &info.component, &info.instance_id}) {
      if (!ValidDiscoveryName(*s)) {
        return Err(StatusCode::kInvalidArgument,
                   "discovery: '{}' is not a valid name (letters, digits, '.', '_', '-')", *s);
      }
    }
    const fs::path path = Dir(info.namespace_name, info.component) / (info.instance_id + ".json");
    if (auto old = ReadEntry(path); old && Live(*old)) {
      return Err(StatusCode::kFailedPrecondition, "discovery: {} is already registered (pid {})",
                 info.key(), old->pid);
    }
    auto lease = std::make_unique<FileLease>(std::move(info), path, options_);
    TANDEM_RETURN_IF_ERROR(lease->Write());
    lease->Start();
    return std::unique_ptr<Lease>(std::move(lease));
  }

  Result<std::vector<InstanceInfo>> List(const std::string& namespace_name,
                                         const std::string& component) override {
    std::vector<InstanceInfo> out;
    if (!ValidDiscoveryName(namespace_name) || !ValidDiscoveryName(component)) {
      return Err(StatusCode::kInvalidArgument, "discovery: bad namespace or component '{}/{}'",
                 namespace_name, component);
    }
    const fs::path dir = Dir(namespace_name, component);
    std::error_code ec;
    if (!fs::exists(dir, ec)) return out;
    fs::directory_iterator it(dir, ec);
    if (ec) return Err(StatusCode::kFailedPrecondition, "discovery: cannot read {}: {}",
                       dir.string(), ec.message());
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      if (ec) break;
      const fs::path& p = it->path();
      if (p.extension() != ".json") continue;  // also skips temporary files
      auto entry = ReadEntry(p);
      if (!entry) continue;
      if (entry->host == host_ && ProcessGone(entry->pid)) {
        std::error_code ignored;
        fs::remove(p, ignored);  // its process will never delete it
        continue;
      }
      if (!Live(*entry)) continue;
      out.push_back(std::move(entry->info));
    }
    std::sort(out.begin(), out.end(), [](const InstanceInfo& a, const InstanceInfo& b) {
      return a.instance_id < b.instance_id;
    });
    return out;
  }

 private:
  fs::path Dir(const std::string& ns, const std::string& component) const {
    return fs::path(options_.root) / ns / component;
  }
  bool Live(const Entry& e) const {
    if (e.expires_at_ms < NowMs()) return false;
    return !(e.host == host_ && ProcessGone(e.pid));
  }

  FileDiscoveryOptions options_;
  std::string host_;
};

}  // namespace

std::string DefaultDiscoveryDir() {
  if (const char* env = std::getenv("TANDEM_DISCOVERY_DIR"); env && *env) return env;
  return fmt::format("/tmp/tandem-discovery-{}", getuid());
}

std::unique_ptr<Discovery> MakeFileDiscovery(FileDiscoveryOptions options) {
  return std::make_unique<FileDiscovery>(std::move(options));
}

}  // namespace tandem::runtime
