// Runs a command through /bin/sh and captures stdout, stderr and the exit status (tests only).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

namespace tandem::testing {

struct CommandResult {
  int exit_code = -1;     // exit status, or 128 + signal when killed by one
  std::string out, err;
};

inline std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

// `timeout_s` bounds the run (coreutils timeout); a timed-out command exits 124.
inline CommandResult RunCommand(const std::string& command, int timeout_s = 600) {
  char err_path[] = "/tmp/tandem_test_stderr_XXXXXX";
  int fd = mkstemp(err_path);
  if (fd >= 0) close(fd);
  std::string full = "timeout " + std::to_string(timeout_s) + " " + command + " 2>" + err_path;
  CommandResult r;
  FILE* pipe = popen(full.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  int status = pclose(pipe);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) r.exit_code = 128 + WTERMSIG(status);
  std::ifstream in(err_path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  std::remove(err_path);
  return r;
}

}  // namespace tandem::testing
