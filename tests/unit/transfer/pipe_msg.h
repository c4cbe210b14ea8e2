// Length-prefixed messages over pipes, for tests that fork a child agent (the parent and the child
// exchange metadata and commands). Blocking; false / nullopt when the other end is gone.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>

namespace tandem::transfer::testing {

inline bool WriteMsg(int fd, const std::string& s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  std::string buf(reinterpret_cast<char*>(&n), 4);
  buf += s;
  size_t off = 0;
  while (off < buf.size()) {
    ssize_t w = ::write(fd, buf.data() + off, buf.size() - off);
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

inline bool ReadFull(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

inline std::optional<std::string> ReadMsg(int fd) {
  uint32_t n = 0;
  if (!ReadFull(fd, reinterpret_cast<char*>(&n), 4)) return std::nullopt;
  std::string s(n, '\0');
  if (!ReadFull(fd, s.data(), n)) return std::nullopt;
  return s;
}

}  // namespace tandem::transfer::testing
