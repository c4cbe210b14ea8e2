// The tcp transfer backend's target side (transfer/tcp_backend.h, wire format in tcp_wire.h): the
// bytes a peer sends on a data connection, through a real listener of MakeTcpBackend on loopback.
// The first input byte: bit 0 set -> a valid hello (this agent's instance) goes first, so that the
// rest reaches the request loop (kWrite, kRead, kNotify frames against the registered host region
// at fuzz::kHostAddr); clear -> the rest is the whole conversation. The target must answer, close,
// and never touch memory outside its registrations (ASan) or hang (SendAndDrain).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_transfer_host.h"
#include "transfer/tcp_backend.h"
#include "transfer/tcp_wire.h"

using namespace tandem;
using namespace tandem::transfer;

namespace {

struct Target {
  fuzz::FuzzHost host;
  std::unique_ptr<Backend> backend;
  uint16_t port = 0;
};

Target& TheTarget() {
  static Target* t = [] {
    auto* t = new Target;
    auto backend = MakeTcpBackend(t->host, {{"host", "127.0.0.1"}, {"port", "0"}, {"io_timeout_ms", "2000"}});
    if (!backend.ok()) {
      fprintf(stderr, "tcp_wire_fuzz: %s\n", backend.status().ToString().c_str());
      abort();
    }
    t->backend = std::move(backend).value();
    std::string host;
    if (!tcp::ParseHostPort(t->backend->ConnectionInfo(), &host, &t->port).ok()) abort();
    return t;
  }();
  return *t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  TheTarget();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Target& t = TheTarget();
  const std::string bytes = fuzz::WithOptionalHello<tcp::FrameHeader>(data, size, tcp::FrameType::kHello);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(t.port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    perror("tcp_wire_fuzz: connect");
    abort();
  }
  fuzz::SendAndDrain(fd, bytes.data(), bytes.size());
  return 0;
}
