// SpareDescriptor: one file descriptor (/dev/null) held in reserve by a listener, so that when
// accept() fails with EMFILE or ENFILE (the descriptor table is full) the listener can still
// accept the connections waiting in its backlog and close them at once: their clients see a close
// rather than a hang until their own timeout. The usual remedy (libuv, nginx); POSIX only.
// Not thread-safe: one owner, the listener's accept loop.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tandem {

class SpareDescriptor {
 public:
  SpareDescriptor() = default;  // holds none until Refill()
  ~SpareDescriptor() { Release(); }
  SpareDescriptor(const SpareDescriptor&) = delete;
  SpareDescriptor& operator=(const SpareDescriptor&) = delete;

  // Takes a spare descriptor when none is held (none could be had the last time, or Release()).
  void Refill() {
    if (fd_ < 0) fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  void Release() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // After accept() on `listen_fd` failed for want of descriptors: frees the spare one, accepts and
  // closes at most `max` waiting connections (without blocking), then takes the spare back. The
  // number refused; 0 without a spare (then it only tries to take one again).
  int RefuseWaiting(int listen_fd, int max = 64) {
    if (fd_ < 0) {
      Refill();
      return 0;
    }
    Release();
    int refused = 0;
    for (; refused < max; ++refused) {
      pollfd p{listen_fd, POLLIN, 0};
      if (::poll(&p, 1, 0) != 1) break;
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) break;
      ::close(fd);
    }
    Refill();
    return refused;
  }

 private:
  int fd_ = -1;
};

}  // namespace tandem
