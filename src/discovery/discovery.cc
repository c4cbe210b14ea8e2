#include "discovery/discovery.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "common/logging.h"
#include <fmt/format.h>

namespace tandem::runtime {

bool ValidDiscoveryName(const std::string& s) {
  if (s.empty() || s == "." || s == "..") return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string NewInstanceId() {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd() ^ counter.fetch_add(1));
  return fmt::format("{:012x}", gen() & 0xffffffffffffull);
}


nlohmann::json ToJson(const InstanceInfo& info) {
  return {{"namespace", info.namespace_name}, {"component", info.component},
          {"instance_id", info.instance_id}, {"endpoint", info.endpoint},
          {"metadata", info.metadata}};
}

Result<InstanceInfo> InstanceFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return Status(StatusCode::kInvalidArgument, "an instance is not an object");
  InstanceInfo info;
  try {
    info.namespace_name = j.at("namespace").get<std::string>();
    info.component = j.at("component").get<std::string>();
    info.instance_id = j.at("instance_id").get<std::string>();
    info.endpoint = j.value("endpoint", std::string());
    info.metadata = j.value("metadata", nlohmann::json::object());
  } catch (const nlohmann::json::exception& e) {
    return Err(StatusCode::kInvalidArgument, "bad instance JSON: {}", e.what());
  }
  return info;
}

namespace {

bool SameList(const std::vector<InstanceInfo>& a, const std::vector<InstanceInfo>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (ToJson(a[i]) != ToJson(b[i])) return false;
  }
  return true;
}

class PollingWatch final : public Discovery::Watch {
 public:
  PollingWatch(Discovery* discovery, std::string ns, std::string component,
               std::function<void(const std::vector<InstanceInfo>&)> on_change,
               std::chrono::milliseconds interval)
      : thread_([=, this, on_change = std::move(on_change)] {
          bool first = true;
          std::vector<InstanceInfo> last;
          std::unique_lock<std::mutex> lock(mu_);
          while (!stop_) {
            lock.unlock();
            auto list = discovery->List(ns, component);
            if (!list.ok()) {
              log::warn("discovery watch {}/{}: {}", ns, component, list.status().ToString());
            } else if (first || !SameList(*list, last)) {
              first = false;
              last = *list;
              on_change(last);
            }
            lock.lock();
            cv_.wait_for(lock, interval, [this] { return stop_; });
          }
        }) {}
  ~PollingWatch() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace

std::unique_ptr<Discovery::Watch> Discovery::WatchComponent(
    const std::string& namespace_name, const std::string& component,
    std::function<void(const std::vector<InstanceInfo>&)> on_change,
    std::chrono::milliseconds interval) {
  return std::make_unique<PollingWatch>(this, namespace_name, component, std::move(on_change),
                                        interval);
}

}  // namespace tandem::runtime
