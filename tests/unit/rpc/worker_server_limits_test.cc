// WorkerServer against stray clients (worker_server.h): a TCP connection that never starts the
// HTTP/2 handshake is closed after handshake_timeout_ms (gRPC's own default would hold it 120 s).
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "engine/echo_engine.h"
#include "rpc/worker_server.h"

namespace tandem::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

int ConnectRaw(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True when the server closed `fd` (EOF or reset) within `timeout`; what it sent is dropped.
bool ClosedWithin(int fd, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) != 1) continue;
    char data[4096];
    if (::recv(fd, data, sizeof(data), 0) <= 0) return true;
  }
  return false;
}

TEST(WorkerServerLimitsTest, ConnectionWithoutAHandshakeIsClosedAfterTheHandshakeTimeout) {
  auto engine = std::make_shared<EchoEngineClient>(nullptr, ServedModelInfo{"echo", 1000, 50});
  WorkerServerOptions o{"127.0.0.1", 0};
  o.handshake_timeout_ms = 500;
  WorkerServer server(engine, o);
  ASSERT_TRUE(server.Start().ok());
  std::vector<int> strays;
  for (int i = 0; i < 20; ++i) {
    int fd = ConnectRaw(server.port());
    ASSERT_GE(fd, 0);
    strays.push_back(fd);
  }
  auto t0 = Clock::now();
  int closed = 0;
  for (int fd : strays) {
    closed += ClosedWithin(fd, 3000ms);
    ::close(fd);
  }
  auto elapsed = Clock::now() - t0;
  EXPECT_EQ(closed, 20);
  EXPECT_GE(elapsed, 400ms);
  EXPECT_LT(elapsed, 2500ms);
  server.Stop(200);
}

TEST(WorkerServerLimitsTest, BadTimeoutsAreInvalidArgument) {
  auto engine = std::make_shared<EchoEngineClient>(nullptr, ServedModelInfo{"echo", 1000, 50});
  WorkerServerOptions o{"127.0.0.1", 0};
  o.keepalive_timeout_ms = 0;
  WorkerServer server(engine, o);
  EXPECT_EQ(server.Start().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::runtime
