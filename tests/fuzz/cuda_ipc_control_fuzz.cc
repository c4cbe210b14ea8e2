// The cuda_ipc backend's control server (transfer/cuda_ipc_control.h): the bytes a peer process
// sends on its abstract unix socket, through a real ControlServer. The first input byte: bit 0
// set -> a valid hello (this agent's instance) goes first, so that the rest reaches the BEGIN/END
// loop (pins of the device region at fuzz::kDeviceAddr); clear -> the rest is the whole
// conversation. The server must answer, close, release its pins and never hang.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fuzz_transfer_host.h"
#include "transfer/cuda_ipc_control.h"

using namespace tandem;
using namespace tandem::transfer;

namespace {

struct Target {
  fuzz::FuzzHost host;
  std::unique_ptr<ipc::ControlServer> server;
  sockaddr_un address{};
  socklen_t address_len = 0;
};

Target& TheTarget() {
  static Target* t = [] {
    auto* t = new Target;
    auto server = ipc::ControlServer::Start(t->host);
    if (!server.ok()) {
      fprintf(stderr, "cuda_ipc_control_fuzz: %s\n", server.status().ToString().c_str());
      abort();
    }
    t->server = std::move(server).value();
    std::string name = ipc::SocketName(fuzz::kInstance);  // "@..." : the abstract namespace
    name[0] = '\0';
    t->address.sun_family = AF_UNIX;
    std::memcpy(t->address.sun_path, name.data(), name.size());
    t->address_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
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
  const std::string bytes = fuzz::WithOptionalHello<ipc::MsgHeader>(data, size, ipc::MsgType::kHello);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&t.address), t.address_len) != 0) {
    perror("cuda_ipc_control_fuzz: connect");
    abort();
  }
  fuzz::SendAndDrain(fd, bytes.data(), bytes.size());
  return 0;
}
