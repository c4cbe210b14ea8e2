// HttpServer's limits against slow, idle and too many clients (http_server.h, "Slow and idle
// clients"): header / body / keep-alive timeouts, the connection cap (evicting the longest-waiting
// header reader, else 503 + Retry-After), and accept() out of descriptors (refusals, one log line).
// Raw blocking sockets play the slow clients; every wait is bounded.
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "common/logging.h"
#include "frontend/http_server.h"
#include "http_test_util.h"

// UBSan's runtime, when linked in (scripts/sanitize.sh asan): its vptr check decides whether a
// vtable is readable by writing it into a pipe, so with the descriptor table full every checked
// virtual call is reported as "object has invalid vptr" (seen with GCC 12's libubsan: a valid
// object, reported as soon as dup() has taken every descriptor).
extern "C" void __ubsan_handle_dynamic_type_cache_miss_abort(void*, void*, void*) __attribute__((weak));

namespace tandem::http {
namespace {

using namespace tandem::http::testing;

// A blocking TCP socket, not yet connected.
int NewSocket() { return ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); }

bool ConnectTo(int fd, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
}

int ConnectRaw(int port) {
  int fd = NewSocket();
  if (fd >= 0 && !ConnectTo(fd, port)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendRaw(int fd, const std::string& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// Reads what has arrived into *got without waiting; true once the server closed (EOF or reset).
bool ClosedByServer(int fd, std::string* got = nullptr) {
  char data[4096];
  for (;;) {
    ssize_t n = ::recv(fd, data, sizeof(data), MSG_DONTWAIT);
    if (n > 0) {
      if (got) got->append(data, n);
      continue;
    }
    if (n == 0) return true;
    return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

// Reads until EOF, a reset or `timeout`; returns the bytes.
std::string ReadToEof(int fd, std::chrono::milliseconds timeout, bool* eof = nullptr) {
  std::string got;
  auto deadline = Clock::now() + timeout;
  if (eof) *eof = false;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, 20);
    if (ClosedByServer(fd, &got)) {
      if (eof) *eof = true;
      break;
    }
  }
  return got;
}

nlohmann::json ErrorOf(const std::string& raw) {
  size_t body = raw.find("\r\n\r\n");
  if (body == std::string::npos) return nullptr;
  auto j = nlohmann::json::parse(raw.substr(body + 4), nullptr, false);
  return j.is_object() && j.contains("error") ? j["error"] : nlohmann::json();
}

class HttpLimitsTest : public ::testing::Test {
 protected:
  void Start(HttpServer::Options o) {
    o.port = 0;
    server_ = std::make_unique<HttpServer>(o);
    server_->Route("GET", "/hello", [](const Request&, ResponseWriter& w) -> asio::awaitable<void> {
      co_await w.WriteFull(200, "text/plain", "hello");
    });
    server_->Route("POST", "/echo", [](const Request& r, ResponseWriter& w) -> asio::awaitable<void> {
      co_await w.WriteFull(200, "text/plain", r.body);
    });
    Status st = server_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    port_ = server_->port();
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
    if (server_) server_->Stop();
  }
  int Raw() {
    int fd = ConnectRaw(port_);
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }
  int Hello() {  // a fresh connection's GET /hello; the status, -1 on failure
    TestClient c(port_);
    auto r = c.Send("GET", "/hello");
    return r ? r->result_int() : -1;
  }

  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::vector<int> fds_;
};

// The trial: many more half-open connections than the cap. During it a normal request is
// answered (the cap evicts the longest-waiting header reader); after the header timeout at most
// the cap is open (in fact none), trickled header bytes notwithstanding.
TEST_F(HttpLimitsTest, SlowClientTrialKeepsAtMostTheCapAndServesNormalRequests) {
  constexpr size_t kCap = 64;
  constexpr int kSlow = 400;
  HttpServer::Options o;
  o.max_connections = kCap;
  o.header_timeout = 1500ms;
  Start(o);
  ASSERT_EQ(server_->max_connections(), kCap);

  std::atomic<bool> trial_over{false};
  std::atomic<int> answered{0}, failed{0};
  std::thread normal([&] {  // a normal client all along
    while (!trial_over) {
      (Hello() == 200 ? answered : failed)++;
      std::this_thread::sleep_for(50ms);
    }
  });

  auto t0 = Clock::now();
  std::vector<int> slow;
  for (int i = 0; i < kSlow; ++i) {
    int fd = Raw();
    ASSERT_GE(fd, 0) << "connect " << i << ": " << strerror(errno);
    ASSERT_TRUE(SendRaw(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Ty"));
    slow.push_back(fd);
  }
  // The cap holds while they are all connected.
  EXPECT_TRUE(WaitFor([&] { return server_->num_connections() <= kCap; }, 1000ms))
      << server_->num_connections();
  // A slowloris trickles more header bytes: the header deadline does not move.
  std::this_thread::sleep_until(t0 + 700ms);
  for (int fd : slow) SendRaw(fd, "pe: a");
  EXPECT_LE(server_->num_connections(), kCap);  // the normal client counts in it

  std::this_thread::sleep_until(t0 + 1500ms + 700ms);
  trial_over = true;
  normal.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GE(answered.load(), 10);

  int still_open = 0, got_408 = 0;
  for (int fd : slow) {
    std::string got;
    if (!ClosedByServer(fd, &got)) ++still_open;
    if (got.rfind("HTTP/1.1 408", 0) == 0) {
      ++got_408;
      EXPECT_TRUE(ErrorOf(got).is_object()) << got;
    }
  }
  EXPECT_LE(still_open, static_cast<int>(kCap));
  EXPECT_EQ(still_open, 0);  // every one is past its header deadline
  EXPECT_GT(got_408, 0);     // the ones that outlived eviction timed out, with an answer
  // (the 408s linger up to 1 s for their client to read them)
  EXPECT_TRUE(WaitFor([&] { return server_->num_connections() == 0; }, 2000ms))
      << server_->num_connections();
  EXPECT_EQ(Hello(), 200);
}

TEST_F(HttpLimitsTest, HeadersSlowerThanTheHeaderTimeoutGet408AndSilenceIsClosed) {
  HttpServer::Options o;
  o.header_timeout = 500ms;
  Start(o);
  int partial = Raw(), silent = Raw();
  ASSERT_TRUE(SendRaw(partial, "GET /hello HTTP/1.1\r\nHost"));
  auto t0 = Clock::now();
  bool eof = false;
  std::string got = ReadToEof(partial, 3000ms, &eof);
  auto elapsed = Clock::now() - t0;
  EXPECT_TRUE(eof);
  EXPECT_EQ(got.rfind("HTTP/1.1 408", 0), 0u) << got;
  EXPECT_EQ(ErrorOf(got)["type"], "invalid_request_error") << got;
  EXPECT_GE(elapsed, 400ms);
  EXPECT_LT(elapsed, 1500ms);
  got = ReadToEof(silent, 1000ms, &eof);
  EXPECT_TRUE(eof);
  EXPECT_EQ(got, "");  // nothing asked, nothing answered
}

TEST_F(HttpLimitsTest, BodyTricklingSlowerThanTheBodyTimeoutGets408) {
  HttpServer::Options o;
  o.header_timeout = 5000ms;
  o.body_timeout = 1000ms;
  Start(o);
  int fd = Raw();
  ASSERT_TRUE(SendRaw(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"));
  auto t0 = Clock::now();
  std::string got;
  bool closed = false;
  while (!closed && Clock::now() - t0 < 4s) {  // a byte every 100 ms: 10 s for the body
    SendRaw(fd, "a");
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, 100);
    closed = ClosedByServer(fd, &got);
  }
  auto elapsed = Clock::now() - t0;
  EXPECT_TRUE(closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 408", 0), 0u) << got;
  EXPECT_NE(ErrorOf(got)["message"].get<std::string>().find("body"), std::string::npos) << got;
  EXPECT_GE(elapsed, 900ms);
  EXPECT_LT(elapsed, 2000ms);
  EXPECT_EQ(Hello(), 200);
}

TEST_F(HttpLimitsTest, IdleKeepAliveConnectionIsClosedAfterTheKeepAliveTimeout) {
  HttpServer::Options o;
  o.keep_alive_timeout = 500ms;
  o.header_timeout = 5000ms;
  Start(o);
  TestClient c(port_);
  for (int i = 0; i < 3; ++i) {  // reused within the timeout: still open
    auto r = c.Send("GET", "/hello");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->result_int(), 200);
    EXPECT_TRUE(r->keep_alive());
    std::this_thread::sleep_for(250ms);
  }
  auto t0 = Clock::now() - 250ms;
  std::string rest = c.ReadToEof(3000ms);
  auto elapsed = Clock::now() - t0;
  EXPECT_TRUE(c.saw_eof());
  EXPECT_GE(elapsed, 400ms);
  EXPECT_LT(elapsed, 1500ms);
  EXPECT_TRUE(WaitFor([&] { return server_->num_connections() == 0; }, 1000ms));
}

// Every connection busy (reading a body): the next one gets 503, Retry-After, a JSON error.
TEST_F(HttpLimitsTest, ConnectionBeyondTheCapGets503WithRetryAfter) {
  HttpServer::Options o;
  o.max_connections = 2;
  o.body_timeout = 10000ms;
  Start(o);
  int a = Raw(), b = Raw();
  for (int fd : {a, b}) {
    ASSERT_TRUE(SendRaw(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0"));
  }
  ASSERT_TRUE(WaitFor([&] { return server_->num_connections() == 2; }, 1000ms));
  std::this_thread::sleep_for(100ms);  // both past their headers
  int over = Raw();
  ASSERT_TRUE(SendRaw(over, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"));
  bool eof = false;
  std::string got = ReadToEof(over, 3000ms, &eof);
  EXPECT_TRUE(eof);
  EXPECT_EQ(got.rfind("HTTP/1.1 503", 0), 0u) << got;
  EXPECT_NE(got.find("Retry-After: 1\r\n"), std::string::npos) << got;
  nlohmann::json e = ErrorOf(got);
  ASSERT_TRUE(e.is_object()) << got;
  EXPECT_EQ(e["type"], "server_error");
  EXPECT_EQ(e["code"], "too_many_connections");

  // The busy ones were not touched: a finishes its body and is answered.
  ASSERT_TRUE(SendRaw(a, "123456789"));
  std::string answer;
  EXPECT_TRUE(WaitFor([&] {
    ClosedByServer(a, &answer);
    return answer.find("0123456789") != std::string::npos;
  }, 2000ms)) << answer;
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  // a is idle now (evictable): a new client gets in, a is closed.
  EXPECT_EQ(Hello(), 200);
  EXPECT_TRUE(WaitFor([&] { return ClosedByServer(a); }, 1000ms));
  EXPECT_FALSE(ClosedByServer(b));
}

// A client that closes right after its response is seen at once, not after the keep-alive
// timeout (the EOF can come with the end of the handler; it used to be dropped then).
TEST_F(HttpLimitsTest, ClientThatClosesAfterItsResponseIsSeenAtOnce) {
  HttpServer::Options o;
  o.keep_alive_timeout = 10000ms;
  Start(o);
  int slow = 0;
  for (int i = 0; i < 200 && slow < 3; ++i) {
    int fd = ConnectRaw(port_);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendRaw(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"));
    std::string got;
    ASSERT_TRUE(WaitFor([&] {
      ClosedByServer(fd, &got);
      return got.find("hello") != std::string::npos;
    }, 2000ms));
    ::close(fd);
    slow += !WaitFor([&] { return server_->num_connections() == 0; }, 500ms);
  }
  EXPECT_EQ(slow, 0);
}

// The highest descriptor number open now.
int HighestFd() {
  int highest = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    highest = std::max(highest, std::atoi(entry.path().filename().c_str()));
  }
  return highest;
}

// accept() with the descriptor table full: the waiting connections are refused (not left
// hanging), one warning line however often it happens, and the server serves again once
// descriptors are free.
TEST_F(HttpLimitsTest, OutOfDescriptorsRefusesWithOneLogLineAndRecovers) {
  if (&__ubsan_handle_dynamic_type_cache_miss_abort != nullptr) {
    GTEST_SKIP() << "UBSan's vptr check needs free descriptors (it probes memory through a pipe); "
                    "this test runs in the ordinary build";
  }
  HttpServer::Options o;
  o.header_timeout = 10000ms;  // the admitted ones keep their descriptors
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(4096);
  spdlog::default_logger()->sinks().push_back(sink);
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  const spdlog::level::level_enum level = spdlog::default_logger()->level();
  spdlog::default_logger()->set_level(spdlog::level::info);  // the warning counted below is seen
  struct Cleanup {
    std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink;
    rlimit saved;
    std::unique_ptr<HttpServer>& server;
    spdlog::level::level_enum level;
    ~Cleanup() {
      setrlimit(RLIMIT_NOFILE, &saved);
      spdlog::default_logger()->set_level(level);
      if (server) server->Stop();  // no server thread logs while the sink list changes
      auto& sinks = spdlog::default_logger()->sinks();
      sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
    }
  } cleanup{sink, saved, server_, level};
  Start(o);  // after the sink is added, for the same reason

  // Every client socket exists before the limit drops: connect() needs no new descriptor.
  std::vector<int> wave1(40), wave2(20);
  for (int& fd : wave1) fds_.push_back(fd = NewSocket());
  for (int& fd : wave2) fds_.push_back(fd = NewSocket());
  // Clients for after the recovery: the first that is not refused must be served (one could
  // still meet the table full if the server's last closes lag its connection count).
  std::vector<int> after(5);
  for (int& fd : after) fds_.push_back(fd = NewSocket());
  const auto t0 = Clock::now();
  rlimit low = saved;
  low.rlim_cur = HighestFd() + 1;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  // The table full (its holes too), then room for 4 accepted connections.
  const size_t before_fill = fds_.size();
  for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fds_.push_back(fd);
  ASSERT_EQ(errno, EMFILE);
  const size_t filled = fds_.size() - before_fill;
  for (int i = 0; i < 4; ++i) {
    ::close(fds_.back());
    fds_.pop_back();
  }

  for (int fd : wave1) ASSERT_TRUE(ConnectTo(fd, port_)) << strerror(errno);
  std::this_thread::sleep_for(300ms);
  for (int fd : wave2) ASSERT_TRUE(ConnectTo(fd, port_)) << strerror(errno);
  // Refused (closed at once), not left in the backlog: every one of wave 2 (the table is still
  // full of wave 1's admitted connections) and most of wave 1.
  int refused2 = 0;
  WaitFor([&] {
    refused2 = 0;
    for (int fd : wave2) refused2 += ClosedByServer(fd);
    return refused2 == static_cast<int>(wave2.size());
  }, 10000ms);
  int refused1 = 0;
  for (int fd : wave1) refused1 += ClosedByServer(fd);
  // On failure, what the server did and said (a CI run failed here once without saying which).
  auto said = [&] {
    std::string out = fmt::format(
        "wave 1 refused {}/{}, wave 2 refused {}/{}, {} open, limit {} with {} filled, {} cpus; log:",
        refused1, wave1.size(), refused2, wave2.size(), server_->num_connections(),
        low.rlim_cur, filled, std::thread::hardware_concurrency());
    for (const std::string& line : sink->last_formatted()) {
      if (line.find("http:") != std::string::npos) out += " | " + line.substr(0, 200);
    }
    return out;
  };
  EXPECT_EQ(refused2, static_cast<int>(wave2.size())) << said();
  EXPECT_GE(refused1, static_cast<int>(wave1.size()) - 8) << said();

  // Descriptors free again (the clients close theirs; the server sees EOF): a new connection
  // is served, the limit still low.
  for (int fd : wave1) ::shutdown(fd, SHUT_RDWR);
  EXPECT_TRUE(WaitFor([&] { return server_->num_connections() == 0; }, 10000ms)) << said();
  std::this_thread::sleep_for(300ms);  // past the accept pause
  std::string got;
  int tries = 0;
  for (int fd : after) {
    ++tries;
    ASSERT_TRUE(ConnectTo(fd, port_)) << strerror(errno);
    if (!SendRaw(fd, "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) continue;
    got = ReadToEof(fd, 10000ms);
    if (!got.empty()) break;  // served (or answered otherwise: checked below), not refused
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got << "\n" << tries << " tries; " << said();
  EXPECT_LE(tries, 2) << said();  // at most one refusal after the descriptors came back

  int lines = 0;
  for (const std::string& line : sink->last_formatted()) {
    lines += line.find("accept failed") != std::string::npos;
  }
  // Two bouts of failures, one line (the line limiter's window is 10 s: a run slower than that
  // may log a second one).
  const bool within_window = Clock::now() - t0 < 9s;
  EXPECT_EQ(lines, within_window ? 1 : std::min(lines, 2)) << said();
  EXPECT_GE(lines, 1) << said();
}

TEST(HttpLimitsOptionsTest, BadLimitsAreInvalidArgument) {
  HttpServer::Options o;
  o.port = 0;
  o.max_connections = 0;
  EXPECT_EQ(HttpServer(o).Start().code(), StatusCode::kInvalidArgument);
  o.max_connections = 8;
  o.header_timeout = 0ms;
  EXPECT_EQ(HttpServer(o).Start().code(), StatusCode::kInvalidArgument);
  o.header_timeout = 1000ms;
  o.keep_alive_timeout = -1ms;
  EXPECT_EQ(HttpServer(o).Start().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::http
