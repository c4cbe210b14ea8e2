#include "deploy/supervisor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "common/logging.h"
#include "discovery/etcd_discovery.h"
#include "discovery/file_discovery.h"

extern char** environ;

namespace tandem::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) return fmt::format("exit {}", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return fmt::format("signal {} ({})", sig, sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
  }
  return fmt::format("status {}", wait_status);
}

// GET http://host:port<path>: the status code, or 0 when there is no answer within `timeout`.
int HttpGetStatus(const std::string& host, int port, const std::string& path,
                  std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* addrs = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &addrs) != 0) return 0;
  int status = 0;
  const auto end = Clock::now() + timeout;
  auto wait = [&end](int fd, short events) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    pollfd p{fd, events, 0};
    return left.count() > 0 && poll(&p, 1, static_cast<int>(left.count())) == 1;
  };
  for (addrinfo* a = addrs; a && status == 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    bool connected = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (!connected && errno == EINPROGRESS && wait(fd, POLLOUT)) {
      int err = 0;
      socklen_t len = sizeof err;
      connected = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
    const std::string request = "GET " + path + " HTTP/1.1\r\nHost: " + host +
                                "\r\nConnection: close\r\n\r\n";
    std::string response;
    if (connected && send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
                         static_cast<ssize_t>(request.size())) {
      char buf[512];
      while (response.find("\r\n") == std::string::npos && wait(fd, POLLIN)) {
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        response.append(buf, static_cast<size_t>(n));
      }
    }
    close(fd);
    // "HTTP/1.1 200 OK"
    if (response.rfind("HTTP/1.", 0) == 0 && response.size() > 12) {
      status = std::atoi(response.c_str() + 9);
    }
  }
  freeaddrinfo(addrs);
  return status;
}

// Lines from the children, one write each, so that they do not interleave mid-line.
std::mutex g_output_mu;

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// Reads a child's output until EOF (every writer gone), prefixing each line.
void ForwardOutput(int pipe_fd, std::string prefix, int out_fd, std::string log_path) {
  const int log_fd =
      log_path.empty() ? -1 : open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  std::string pending;
  char buf[4096];
  auto flush_lines = [&](bool all) {
    size_t start = 0;
    std::string out;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      out += prefix;
      out.append(pending, start, nl + 1 - start);
    }
    if (all && start < pending.size()) {
      out += prefix + pending.substr(start) + "\n";
      start = pending.size();
    }
    if (log_fd >= 0) WriteAll(log_fd, pending.substr(0, start));
    pending.erase(0, start);
    if (!out.empty()) {
      std::lock_guard<std::mutex> lock(g_output_mu);
      WriteAll(out_fd, out);
    }
  };
  while (true) {
    const ssize_t n = read(pipe_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    flush_lines(false);
  }
  flush_lines(true);
  close(pipe_fd);
  if (log_fd >= 0) close(log_fd);
}

}  // namespace

struct Supervisor::Child {
  enum class State { kStarting, kReady, kBackoff, kStopped, kRemoved };
  ComponentSpec spec;
  size_t group = SIZE_MAX;  // workers: the graph group and replica index it is
  int replica = -1;
  bool draining = false;    // SIGTERMed by a scale-down: not restarted
  Clock::time_point drain_kill_at;
  State state = State::kStopped;
  pid_t pid = -1;
  bool ever_ready = false;
  int restarts_in_row = 0;
  int num_restarts = 0;
  std::string last_exit;
  Clock::time_point started_at, ready_at, restart_at, next_check;
  std::vector<std::thread> readers;  // one per incarnation; joined at the end of Run
};

Supervisor::Supervisor(Graph graph, SupervisorOptions options)
    : graph_(std::move(graph)), options_(std::move(options)) {
  if (graph_.planner.enabled) {
    for (const GraphWorkerGroup& w : graph_.workers) {
      if (w.mode == "prefill" || w.mode == "decode") desired_[w.mode] = w.replicas;
    }
  }
}

Status Supervisor::SetReplicas(const std::string& mode, int count) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = desired_.find(mode);
  if (it == desired_.end()) {
    return Err(StatusCode::kInvalidArgument, "graph '{}': {} workers cannot be scaled (only the prefill "
               "and decode groups of a graph with a planner section)", graph_.name, mode);
  }
  const int most = mode == "prefill" ? graph_.planner.max_prefill : graph_.planner.max_decode;
  if (count < 0 || count > most) {
    return Err(StatusCode::kInvalidArgument, "graph '{}': {} replicas {} outside [0, {}]", graph_.name,
               mode, count, most);
  }
  if (it->second != count) log::info("graph '{}': {} replicas {} -> {}", graph_.name, mode, it->second, count);
  it->second = count;
  return Status::Ok();
}

int Supervisor::Replicas(const std::string& mode) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = desired_.find(mode);
  return it == desired_.end() ? -1 : it->second;
}

void Supervisor::Reconcile() {
  std::map<std::string, int> desired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    desired = desired_;
  }
  const auto now = Clock::now();
  for (size_t g = 0; g < graph_.workers.size(); ++g) {
    auto want = desired.find(graph_.workers[g].mode);
    if (want == desired.end()) continue;
    std::vector<Child*> active;
    std::set<int> used;  // replica indexes of live children (draining ones included)
    for (auto& c : children_) {
      if (c->group != g || c->state == Child::State::kRemoved) continue;
      used.insert(c->replica);
      if (!c->draining) active.push_back(c.get());
    }
    for (int r = 0; static_cast<int>(active.size()) < want->second; ++r) {
      if (used.count(r)) continue;
      children_.push_back(std::make_unique<Child>());
      Child& c = *children_.back();
      c.spec = ExpandWorker(graph_, g, r);
      c.group = g;
      c.replica = r;
      used.insert(r);
      active.push_back(&c);
      if (Status st = Spawn(c); !st.ok()) {  // retried like a crash
        log::warn("{}: cannot start: {}", c.spec.name, st.message());
        c.state = Child::State::kBackoff;
        c.restart_at = now + std::chrono::milliseconds(graph_.restart.backoff_ms);
      }
    }
    std::sort(active.begin(), active.end(), [](Child* a, Child* b) { return a->replica > b->replica; });
    for (size_t i = 0; static_cast<int>(active.size() - i) > want->second; ++i) {
      Child& c = *active[i];
      c.draining = true;
      if (c.pid <= 0) {  // waiting to restart: nothing to drain
        c.state = Child::State::kRemoved;
        log::info("{}: removed (scale-down)", c.spec.name);
        continue;
      }
      const double wait_s = graph_.planner.drain_timeout_s + graph_.shutdown_grace_s;
      c.drain_kill_at = now + std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000));
      log::info("{}: draining for a scale-down (SIGTERM to pid {}: it leaves discovery, its requests "
                "get {} s)", c.spec.name, c.pid, graph_.planner.drain_timeout_s);
      kill(c.pid, SIGTERM);
    }
  }
  for (auto& c : children_) {
    if (c->draining && c->pid > 0 && now >= c->drain_kill_at) {
      log::warn("{}: still running {:.0f} s into its drain; SIGKILL", c->spec.name,
                graph_.planner.drain_timeout_s + graph_.shutdown_grace_s);
      kill(-c->pid, SIGKILL);
      kill(c->pid, SIGKILL);
      c->drain_kill_at = Clock::time_point::max();
    }
  }
}

Supervisor::~Supervisor() {
  for (auto& c : children_) {
    if (c->pid > 0) {
      kill(-c->pid, SIGKILL);
      kill(c->pid, SIGKILL);
      waitpid(c->pid, nullptr, 0);
      c->pid = -1;
    }
    for (auto& t : c->readers) {
      if (t.joinable()) t.join();
    }
  }
}

Status Supervisor::Spawn(Child& child) {
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> args = {options_.binary};
  args.insert(args.end(), child.spec.args.begin(), child.spec.args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::map<std::string, std::string> overrides = child.spec.env;
  if (!options_.discovery_dir.empty()) overrides["TANDEM_DISCOVERY_DIR"] = options_.discovery_dir;
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (!overrides.count(kv.substr(0, kv.find('=')))) env.push_back(kv);
  }
  for (const auto& [k, v] : overrides) env.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return Err(StatusCode::kFailedPrecondition, "pipe: {}", std::strerror(errno));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return Err(StatusCode::kFailedPrecondition, "fork: {}", std::strerror(errno));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // the supervisor (this forking thread) gone: die too
    if (getppid() != parent) _exit(127);
    setpgid(0, 0);  // Ctrl-C reaches the supervisor only; it stops the children in order
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(argv[0], argv.data(), envp.data());
    static const char kMsg[] = "tandem serve: exec of the tandem binary failed\n";
    (void)!write(2, kMsg, sizeof kMsg - 1);
    _exit(127);
  }
  close(fds[1]);
  setpgid(pid, pid);  // also from here, so that kill(-pid) works at once (either call may win)
  child.pid = pid;
  child.state = Child::State::kStarting;
  child.started_at = Clock::now();
  child.next_check = child.started_at;
  const std::string log_path =
      options_.log_dir.empty() ? "" : options_.log_dir + "/" + child.spec.name + ".log";
  child.readers.emplace_back(ForwardOutput, fds[0], "[" + child.spec.name + "] ",
                             options_.output_fd, log_path);
  log::info("{}: started (pid {})", child.spec.name, pid);
  return Status::Ok();
}

bool Supervisor::CheckReady(Child& child) {
  if (child.spec.mode == "frontend") {
    return HttpGetStatus(child.spec.host, child.spec.port, "/health", 1000ms) == 200;
  }
  auto list = discovery_->List(graph_.namespace_name, child.spec.mode);
  if (!list.ok()) return false;
  for (const InstanceInfo& info : *list) {
    if (info.instance_id != child.spec.instance_id) continue;
    const auto pid = info.metadata.find("pid");
    return pid == info.metadata.end() || !pid->is_number_integer() || pid->get<int64_t>() == child.pid;
  }
  return false;
}

void Supervisor::Reap(Child& child, int wait_status) {
  child.pid = -1;
  child.last_exit = DescribeExit(wait_status);
  const int64_t backoff_ms = std::min<int64_t>(
      graph_.restart.max_backoff_ms,
      static_cast<int64_t>(graph_.restart.backoff_ms) << std::min(child.restarts_in_row, 20));
  child.state = Child::State::kBackoff;
  child.restart_at = Clock::now() + std::chrono::milliseconds(backoff_ms);
  log::warn("{}: {} after {:.1f} s; restarting in {} ms ({} restart(s) in a row so far)",
            child.spec.name, child.last_exit, Seconds(Clock::now() - child.started_at), backoff_ms,
            child.restarts_in_row);
}

Status Supervisor::Run() {
  sigset_t signals, old_mask;
  sigemptyset(&signals);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, &old_mask);

  if (options_.binary.empty()) {
    std::error_code ec;
    options_.binary = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  }
  if (!options_.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.log_dir, ec);
  }
  Status result = ValidateGraph(graph_);
  if (graph_.discovery.empty()) {
    discovery_ = MakeFileDiscovery(FileDiscoveryOptions{options_.discovery_dir});
  } else if (result.ok()) {  // the workers register there: readiness is read there
    auto made = MakeDiscovery(graph_.discovery);
    if (made.ok()) discovery_ = std::move(*made);
    else result = made.status();
  }
  if (result.ok() && graph_.frontend.port == 0) {
    // A port that was free a moment ago (bind :0, read, close).
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      graph_.frontend.port = ntohs(addr.sin_port);
    }
    if (fd >= 0) close(fd);
    if (graph_.frontend.port == 0) result = Err(StatusCode::kFailedPrecondition, "no free port");
  }
  if (result.ok()) {
    for (size_t g = 0; g < graph_.workers.size(); ++g) {
      for (int r = 0; r < graph_.workers[g].replicas; ++r) {
        children_.push_back(std::make_unique<Child>());
        children_.back()->spec = ExpandWorker(graph_, g, r);
        children_.back()->group = g;
        children_.back()->replica = r;
      }
    }
    children_.push_back(std::make_unique<Child>());
    children_.back()->spec = ExpandGraph(graph_).back();  // the frontend
    log::info("graph '{}' ({}): {} agg, {} prefill, {} decode worker(s), frontend on "
              "http://{}:{}, namespace '{}', discovery {}",
              graph_.name, graph_.source, graph_.NumReplicas("agg"), graph_.NumReplicas("prefill"),
              graph_.NumReplicas("decode"), graph_.frontend.host, graph_.frontend.port,
              graph_.namespace_name,
              !graph_.discovery.empty()      ? DescribeDiscovery(graph_.discovery)
              : options_.discovery_dir.empty() ? DefaultDiscoveryDir()
                                               : options_.discovery_dir);
  }
  for (auto& c : children_) {
    if (!result.ok()) break;
    if (Status st = Spawn(*c); !st.ok()) {
      result = Err(StatusCode::kFailedPrecondition, "{}: cannot start: {}", c->spec.name,
                   st.message());
    }
  }

  const auto started = Clock::now();
  const auto startup_deadline =
      started + std::chrono::milliseconds(static_cast<int64_t>(graph_.startup_timeout_s * 1000));
  bool graph_ready = false;
  while (result.ok()) {
    const timespec tick{0, 50 * 1000 * 1000};
    siginfo_t info;
    const int sig = sigtimedwait(&signals, &info, &tick);
    if (sig > 0) {
      log::info("received signal {} ({}), stopping the graph", sig, sigabbrev_np(sig));
      break;
    }
    if (stop_requested_) break;
    if (graph_ready) Reconcile();  // scaling starts once the graph is up
    const auto now = Clock::now();
    bool all_ready = true;
    for (size_t ci = 0; ci < children_.size(); ++ci) {
      Child& c = *children_[ci];
      if (c.state == Child::State::kRemoved) continue;
      int status = 0;
      if (c.draining) {
        if (c.pid > 0 && waitpid(c.pid, &status, WNOHANG) == c.pid) {
          log::info("{}: drained and stopped ({}); removed", c.spec.name, DescribeExit(status));
          c.pid = -1;
          c.state = Child::State::kRemoved;
        }
        continue;
      }
      if (c.pid > 0 && waitpid(c.pid, &status, WNOHANG) == c.pid) {
        const bool usage_error = WIFEXITED(status) &&
                                 (WEXITSTATUS(status) == 2 || WEXITSTATUS(status) == 127);
        Reap(c, status);
        if (usage_error && !c.ever_ready) {
          result = Err(StatusCode::kFailedPrecondition,
                       "{} cannot start ({}: a usage error or a missing feature; see its output "
                       "above)", c.spec.name, c.last_exit);
          break;
        }
        if (c.restarts_in_row >= graph_.restart.max_restarts) {
          result = Err(StatusCode::kFailedPrecondition,
                       "{} stopped {} time(s) in a row (last: {}); giving up (restart.max_restarts "
                       "= {})", c.spec.name, c.restarts_in_row + 1, c.last_exit,
                       graph_.restart.max_restarts);
          break;
        }
      }
      if (c.state == Child::State::kBackoff && now >= c.restart_at) {
        ++c.restarts_in_row;
        ++c.num_restarts;
        if (Status st = Spawn(c); !st.ok()) {
          result = Err(StatusCode::kFailedPrecondition, "{}: cannot restart: {}", c.spec.name,
                       st.message());
          break;
        }
      }
      if (c.state == Child::State::kStarting && now >= c.next_check) {
        if (CheckReady(c)) {
          c.state = Child::State::kReady;
          c.ready_at = Clock::now();
          c.ever_ready = true;
          log::info("{}: ready (pid {}, {:.1f} s after start)", c.spec.name, c.pid,
                    Seconds(c.ready_at - c.started_at));
        } else {
          c.next_check = Clock::now() + options_.health_interval;
        }
      }
      if (c.state == Child::State::kReady && c.restarts_in_row > 0 &&
          Seconds(now - c.ready_at) >= graph_.restart.reset_after_s) {
        c.restarts_in_row = 0;
      }
      all_ready = all_ready && c.state == Child::State::kReady;
    }
    if (!result.ok()) break;
    if (all_ready && !graph_ready) {
      graph_ready = true;
      log::info("graph '{}' is up in {:.1f} s: http://{}:{}/v1 (Ctrl-C stops it)", graph_.name,
                Seconds(Clock::now() - started), graph_.frontend.host, graph_.frontend.port);
      if (options_.on_ready) options_.on_ready();
    }
    if (!graph_ready && Clock::now() > startup_deadline) {
      std::string waiting;
      for (auto& c : children_) {
        if (c->state != Child::State::kReady && c->state != Child::State::kRemoved && !c->draining) {
        waiting += (waiting.empty() ? "" : ", ") + c->spec.name;
      }
      }
      result = Err(StatusCode::kFailedPrecondition, "graph '{}' not ready within {} s (waiting "
                   "for: {})", graph_.name, graph_.startup_timeout_s, waiting);
    }
  }
  if (!result.ok()) log::error("{}", result.message());
  StopAll();
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  return result;
}

void Supervisor::StopAll() {
  // The frontend first (no new requests), then the workers; all within one grace period.
  for (bool frontend : {true, false}) {
    for (auto it = children_.rbegin(); it != children_.rend(); ++it) {
      Child& c = **it;
      if ((c.spec.mode == "frontend") != frontend) continue;
      if (c.pid > 0) {
        log::info("{}: stopping (SIGTERM to pid {})", c.spec.name, c.pid);
        kill(c.pid, SIGTERM);
      }
      c.state = Child::State::kStopped;
    }
  }
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(graph_.shutdown_grace_s * 1000));
  while (true) {
    bool any = false;
    for (auto& c : children_) {
      int status = 0;
      if (c->pid > 0 && waitpid(c->pid, &status, WNOHANG) == c->pid) {
        log::info("{}: stopped ({})", c->spec.name, DescribeExit(status));
        c->pid = -1;
      }
      any = any || c->pid > 0;
    }
    if (!any || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(20ms);
  }
  for (auto& c : children_) {
    if (c->pid <= 0) continue;
    log::warn("{}: still running {} s after SIGTERM; SIGKILL", c->spec.name,
              graph_.shutdown_grace_s);
    kill(-c->pid, SIGKILL);
    kill(c->pid, SIGKILL);
    waitpid(c->pid, nullptr, 0);
    c->pid = -1;
  }
  for (auto& c : children_) {
    for (auto& t : c->readers) {
      if (t.joinable()) t.join();
    }
    c->readers.clear();
  }
}

}  // namespace tandem::runtime
