// Real etcd and nats-server for the runtime tests, on free loopback ports: each test starts its
// own (fork + exec; PR_SET_PDEATHSIG so they die with the test binary even on a crash), waits
// until it answers (bounded), and stops it in the destructor (SIGTERM, SIGKILL after 3 s, reaped),
// also when the test fails. When the binary is not installed, Start() says so and the test skips
// (TANDEM_REQUIRE_CLUSTER_SERVERS=1 turns the skip into a failure).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "discovery/etcd_client.h"

namespace tandem::runtime::testing {

// PATH, then the sbin folders (Debian puts nats-server in /usr/sbin).
inline std::optional<std::string> FindBinary(const std::string& name) {
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/sbin:/usr/local/sbin:/sbin:/usr/bin:/usr/local/bin";
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find(':', start), path.size());
    const std::string candidate = path.substr(start, end - start) + "/" + name;
    if (end > start && access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

inline bool PortAccepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

inline bool RequireServers() {
  const char* v = std::getenv("TANDEM_REQUIRE_CLUSTER_SERVERS");
  return v && std::string(v) == "1";
}

// A child process with its output in `log_path`.
class ServerProcess {
 public:
  ~ServerProcess() { Stop(); }
  bool Spawn(const std::vector<std::string>& args, const std::string& log_path) {
    std::vector<char*> argv;
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (log_fd >= 0) {
        dup2(log_fd, 1);
        dup2(log_fd, 2);
      }
      execv(argv[0], argv.data());
      _exit(127);
    }
    return true;
  }
  bool Running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }
  // SIGTERM, then SIGKILL after `grace`; reaped.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(3000)) {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    Kill();
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// A server on loopback. Start(): "" when it answers, else why not (missing binary: "not installed").
class ClusterServer {
 public:
  virtual ~ClusterServer() {
    process_.Stop();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  int port() const { return port_; }
  // Stops the server (SIGKILL: it goes away without goodbye).
  void Kill() { process_.Kill(); }
  std::string log_path() const { return dir_ + "/server.log"; }

 protected:
  std::string StartProcess(const std::string& binary_name, const std::string& package,
                           const std::function<std::vector<std::string>(const std::string&)>& args) {
    const auto binary = FindBinary(binary_name);
    if (!binary) return binary_name + " not installed (Debian package " + package + ")";
    char tmpl[] = "/tmp/tandem-cluster-server-XXXXXX";
    if (!mkdtemp(tmpl)) return "mkdtemp failed";
    dir_ = tmpl;
    port_ = FreePort();
    if (!process_.Spawn(args(*binary), log_path())) return "fork failed";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      if (!process_.Running()) return binary_name + " exited at start; see " + log_path();
      if (PortAccepts(port_)) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return binary_name + " did not listen within 20 s";
  }
  std::string dir_;
  int port_ = 0;
  ServerProcess process_;
};

class EtcdServer : public ClusterServer {
 public:
  std::string Start() {
    const int peer_port = FreePort();
    const std::string why = StartProcess("etcd", "etcd-server", [&](const std::string& bin) {
      const std::string client = "http://127.0.0.1:" + std::to_string(port_);
      const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
      return std::vector<std::string>{bin, "--data-dir", dir_ + "/data", "--name", "test",
                                      "--listen-client-urls", client, "--advertise-client-urls",
                                      client, "--listen-peer-urls", peer,
                                      "--initial-advertise-peer-urls", peer, "--initial-cluster",
                                      "test=" + peer};
    });
    if (!why.empty()) return why;
    // Listening is not serving: wait for a leader (a Range that answers), bounded.
    EtcdClient client("127.0.0.1", port_, std::chrono::milliseconds(1000));
    for (int i = 0; i < 200; ++i) {
      if (client.RangePrefix("x").ok()) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return "etcd did not serve within 10 s; see " + log_path();
  }
  std::string url() const { return "etcd://127.0.0.1:" + std::to_string(port_); }
};

class NatsServer : public ClusterServer {
 public:
  std::string Start() {
    return StartProcess("nats-server", "nats-server", [&](const std::string& bin) {
      return std::vector<std::string>{bin, "-a", "127.0.0.1", "-p", std::to_string(port_)};
    });
  }
  // Again on the same port (after Kill), to test reconnects.
  std::string Restart() {
    process_.Kill();
    const auto binary = FindBinary("nats-server");
    if (!process_.Spawn({*binary, "-a", "127.0.0.1", "-p", std::to_string(port_)}, log_path())) {
      return "fork failed";
    }
    for (int i = 0; i < 400; ++i) {
      if (PortAccepts(port_)) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return "nats-server did not listen again within 20 s";
  }
  std::string url() const { return "nats://127.0.0.1:" + std::to_string(port_); }
};

// In a test body: starts `server` or skips (fails when TANDEM_REQUIRE_CLUSTER_SERVERS=1).
#define TANDEM_START_OR_SKIP(server)                                                   \
  do {                                                                                 \
    const std::string _why = (server).Start();                                         \
    if (!_why.empty()) {                                                               \
      if (::tandem::runtime::testing::RequireServers()) FAIL() << _why;                \
      GTEST_SKIP() << _why << ": skipped (scripts/setup.sh installs it)";              \
    }                                                                                  \
  } while (0)

}  // namespace tandem::runtime::testing
