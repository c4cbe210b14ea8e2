// Child processes for multi-process tests: start with extra environment and a log file, check,
// signal, reap (every wait bounded). The destructor SIGKILLs and reaps a child still running.
// Also: a free TCP port on 127.0.0.1, a bounded polling helper, and a process's live children.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <map>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tandem::testing {

class ChildProcess {
 public:
  // argv[0] is looked up in PATH. stdout and stderr go to `log_path` (appended).
  static std::unique_ptr<ChildProcess> Start(const std::vector<std::string>& argv,
                                             const std::vector<std::pair<std::string, std::string>>& env,
                                             const std::string& log_path) {
    pid_t pid = fork();
    if (pid < 0) return nullptr;
    if (pid == 0) {
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
      }
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execvp(args[0], args.data());
      _exit(127);
    }
    return std::unique_ptr<ChildProcess>(new ChildProcess(pid, log_path));
  }

  ~ChildProcess() {
    if (Running()) Signal(SIGKILL);
    WaitExit(std::chrono::seconds(10));
  }

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }

  bool Running() {
    if (exited_) return false;
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      status_ = status;
    }
    return !exited_;
  }
  void Signal(int sig) {
    if (!exited_) kill(pid_, sig);
  }
  // True when the child exited (and was reaped) within `timeout`.
  bool WaitExit(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (Running()) {
      if (std::chrono::steady_clock::now() >= end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }
  int exit_status() const { return status_; }  // raw waitpid status once exited

  std::string Log() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  ChildProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  pid_t pid_;
  std::string log_path_;
  bool exited_ = false;
  int status_ = 0;
};

// A port that was free a moment ago, for a child to bind. Drawn at random below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by default): a port bound as 0 comes
// from that range, where the kernel hands the same port to the next outgoing connection or
// listener of any process before the child binds it (a decode worker's metrics port was taken
// that way once, "Address already in use").
inline int FreePort() {
  static thread_local std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(getpid()));
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int candidate = 20000 + static_cast<int>(rng() % 12000);  // 20000-31999
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(candidate));
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    close(fd);
    if (ok) return candidate;
  }
  return 0;
}

// Polls `f` every 50 ms until it is true or `timeout` passed; returns its last value.
template <typename F>
bool Eventually(F f, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return f();
}

// The whole text of a (/proc) file, "" when it cannot be read.
inline std::string ReadProcText(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A live (not zombie) process.
inline bool Alive(pid_t pid) {
  if (kill(pid, 0) != 0) return errno != ESRCH;
  const std::string stat = ReadProcText("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

// The live children of `parent`: pid -> role ("frontend", or the worker's --mode).
inline std::map<pid_t, std::string> ChildrenOf(pid_t parent) {
  std::map<pid_t, std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = ReadProcText(entry.path() / "stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(paren + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent || state == "Z") continue;
    std::vector<std::string> argv;
    std::istringstream cmdline(ReadProcText(entry.path() / "cmdline"));
    for (std::string arg; std::getline(cmdline, arg, '\0');) argv.push_back(arg);
    std::string role = "?";
    for (size_t i = 1; i < argv.size(); ++i) {
      if (argv[i] == "frontend" && i == 1) role = "frontend";
      if (argv[i] == "--mode" && i + 1 < argv.size()) role = argv[i + 1];
    }
    out[static_cast<pid_t>(std::stoi(name))] = role;
  }
  return out;
}

inline pid_t PidOf(const std::map<pid_t, std::string>& children, const std::string& role) {
  for (const auto& [pid, r] : children) {
    if (r == role) return pid;
  }
  return 0;
}

}  // namespace tandem::testing
