// WorkerServer against stray clients (worker_server.h): a TCP connection that never starts the
// HTTP/2 handshake is closed after handshake_timeout_ms (gRPC's own default would hold it 120 s);
// beyond max_connections a connection is closed at once, and real calls work again once the
// strays are gone.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <memory>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "engine/echo_engine.h"
#include "rpc/tandem.grpc.pb.h"
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

bool SendAll(int fd, const std::string& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

TEST(WorkerServerLimitsTest, ConnectionWithoutAHandshakeIsClosedAfterTheHandshakeTimeout) {
  auto engine = std::make_shared<EchoEngineClient>(nullptr, ServedModelInfo{"echo", 1000, 50});
  WorkerServerOptions o{"127.0.0.1", 0};
  o.handshake_timeout_ms = 500;
  WorkerServer server(engine, o);
  ASSERT_TRUE(server.Start().ok());
  std::vector<int> strays;
  for (int i = 0; i < 20; ++i) {  // half silent, half stopping after the preface's magic
    int fd = ConnectRaw(server.port());
    ASSERT_GE(fd, 0);
    if (i % 2) {
      ASSERT_TRUE(SendAll(fd, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
    }
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

// A Health call through a fresh channel; its status.
grpc::Status Health(int port) {
  grpc::ChannelArguments args;
  args.SetInt("grpc.use_local_subchannel_pool", 1);  // its own connection, not a shared one
  auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                           grpc::InsecureChannelCredentials(), args);
  auto stub = v1::Worker::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 3s);
  v1::HealthRequest req;
  v1::HealthResponse resp;
  return stub->Health(&ctx, req, &resp);
}

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

TEST(WorkerServerLimitsTest, BeyondMaxConnectionsIsClosedAtOnceAndCallsWorkOnceStraysLeave) {
  auto engine = std::make_shared<EchoEngineClient>(nullptr, ServedModelInfo{"echo", 1000, 50});
  WorkerServerOptions o{"127.0.0.1", 0};
  o.max_connections = 3;
  WorkerServer server(engine, o);
  ASSERT_TRUE(server.Start().ok());
  ASSERT_TRUE(Health(server.port()).ok());  // served through the gate
  EXPECT_TRUE(WaitFor([&] { return server.num_connections() == 0; }, 3000ms))
      << server.num_connections();

  // Three strays hold every slot: two sent the HTTP/2 preface (the magic and an empty SETTINGS
  // frame; gRPC serves them), one half of it (the gate waits for the rest).
  const std::string preface = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") +
                              std::string("\0\0\0\x04\0\0\0\0\0", 9);
  std::vector<int> strays;
  for (int i = 0; i < 3; ++i) {
    int fd = ConnectRaw(server.port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, i < 2 ? preface : preface.substr(0, 12)));
    strays.push_back(fd);
  }
  EXPECT_TRUE(WaitFor([&] { return server.num_connections() == 3; }, 2000ms))
      << server.num_connections();
  int over = ConnectRaw(server.port());
  ASSERT_GE(over, 0);
  EXPECT_TRUE(ClosedWithin(over, 1000ms));
  ::close(over);
  EXPECT_FALSE(Health(server.port()).ok());  // refused too, while the strays stay
  for (int fd : strays) EXPECT_FALSE(ClosedWithin(fd, 10ms));

  for (int fd : strays) ::close(fd);
  EXPECT_TRUE(WaitFor([&] { return server.num_connections() == 0; }, 3000ms))
      << server.num_connections();
  grpc::Status st = Health(server.port());
  EXPECT_TRUE(st.ok()) << st.error_message();
  server.Stop(200);
}

// Bytes that are not the HTTP/2 preface are closed at once, not held for the handshake timeout.
TEST(WorkerServerLimitsTest, NotHttp2IsClosedAtOnce) {
  auto engine = std::make_shared<EchoEngineClient>(nullptr, ServedModelInfo{"echo", 1000, 50});
  WorkerServerOptions o{"127.0.0.1", 0};
  o.handshake_timeout_ms = 5000;
  WorkerServer server(engine, o);
  ASSERT_TRUE(server.Start().ok());
  int fd = ConnectRaw(server.port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_TRUE(ClosedWithin(fd, 1000ms));
  ::close(fd);
  EXPECT_TRUE(Health(server.port()).ok());
  server.Stop(200);
}

TEST(WorkerServerLimitsTest, BadTimeoutsAreInvalidArgument) {
  auto engine = std::make_shared<EchoEngineClient>(nullptr, ServedModelInfo{"echo", 1000, 50});
  WorkerServerOptions o{"127.0.0.1", 0};
  o.keepalive_timeout_ms = 0;
  WorkerServer server(engine, o);
  EXPECT_EQ(server.Start().code(), StatusCode::kInvalidArgument);
  WorkerServerOptions capped{"127.0.0.1", 0};
  capped.max_connections = 0;
  WorkerServer server2(engine, capped);
  EXPECT_EQ(server2.Start().code(), StatusCode::kInvalidArgument);
}

TEST(WorkerServerLimitsTest, APortInUseIsFailedPrecondition) {
  auto engine = std::make_shared<EchoEngineClient>(nullptr, ServedModelInfo{"echo", 1000, 50});
  WorkerServer first(engine, WorkerServerOptions{"127.0.0.1", 0});
  ASSERT_TRUE(first.Start().ok());
  WorkerServer second(engine, WorkerServerOptions{"127.0.0.1", first.port()});
  Status st = second.Start();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_TRUE(Health(first.port()).ok());
}

}  // namespace
}  // namespace tandem::runtime
