// Helpers shared by the transfer tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "transfer/agent.h"

namespace tandem::transfer::testing {

inline void FillRandom(std::vector<uint8_t>& buf, uint64_t seed) {
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= buf.size(); i += 8) {
    uint64_t v = rng();
    std::memcpy(buf.data() + i, &v, 8);
  }
  for (; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(rng());
}

// FNV-1a, 64 bits.
inline uint64_t Checksum(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

inline std::unique_ptr<Agent> MakeAgent(const std::string& name, std::vector<std::string> backends = {"local", "tcp"},
                                        BackendParams tcp_params = {}, std::string override_backend = "",
                                        std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  AgentOptions o;
  o.name = name;
  o.backends = std::move(backends);
  if (!tcp_params.empty()) o.backend_params["tcp"] = std::move(tcp_params);
  o.backend_override = std::move(override_backend);
  o.timeout = timeout;
  auto agent = Agent::Create(std::move(o));
  EXPECT_TRUE(agent.ok()) << agent.status().ToString();
  return agent.ok() ? std::move(agent).value() : nullptr;
}

// Waits (bounded) for the end of a transfer and returns its final state.
inline TransferState WaitEnd(const TransferHandle& h, std::chrono::milliseconds max = std::chrono::seconds(20)) {
  (void)h.Wait(max);
  return h.Check();
}

// A write to `peer` posted with a 400 ms timeout, queued behind a transfer the stopped (SIGSTOP)
// peer never answers, must fail with "timed out" within 0.35 to 2 s of the Post.
inline void ExpectQueuedWriteTimesOut(Agent& agent, const DescList& local, const DescList& remote,
                                      const std::string& peer) {
  PostOptions short_timeout;
  short_timeout.timeout = std::chrono::milliseconds(400);
  const auto t0 = std::chrono::steady_clock::now();
  auto h = agent.Post(Op::kWrite, local, remote, peer, std::nullopt, short_timeout);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(WaitEnd(*h, std::chrono::seconds(5)), TransferState::kError);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 0.35);
  EXPECT_LT(waited, 2.0);
  EXPECT_NE(h->status().message().find("timed out"), std::string::npos) << h->status().ToString();
}

}  // namespace tandem::transfer::testing
