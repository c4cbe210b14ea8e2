// A real worker in the test process for the KV event tests: an AsyncEngine over the fake model
// runner (tests/unit/engine), its KvEventPublisher, a WorkerServer serving Generate, the embedded
// event plane's ring and the snapshot, registered in a file discovery as <ns>/agg/<id> (or another
// component).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "../engine/fake_model_runner.h"
#include "discovery/discovery.h"
#include "engine/async_engine.h"
#include "engine/engine.h"
#include "events/event_plane.h"
#include "events/event_ring.h"
#include "router/kv_routing.h"
#include "rpc/event_plane_factory.h"
#include "rpc/worker_server.h"
#include "worker/kv_event_publisher.h"

namespace tandem::worker::testing {

using namespace std::chrono_literals;

template <typename F>
bool Eventually(F f, std::chrono::milliseconds timeout = 15s) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return f();
}

inline std::unique_ptr<Engine> MakeFakeEngine(int num_blocks, int block_size) {
  EngineConfig config;
  config.block_size = block_size;
  config.num_kv_blocks = num_blocks;
  config.max_num_batched_tokens = 64;
  config.max_num_seqs = 4;
  auto e = Engine::Create(std::make_unique<tandem::testing::FakeModelRunner>(512, 4096), nullptr,
                          config);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

struct TestWorker {
  std::string id;
  std::shared_ptr<KvEventPublisher> publisher;
  std::shared_ptr<AsyncEngine> engine;
  std::shared_ptr<runtime::EventRing> ring = std::make_shared<runtime::EventRing>();
  std::unique_ptr<runtime::WorkerServer> server;
  std::unique_ptr<runtime::Lease> lease;

  // Starts it; `discovery` null: not registered (then Start the publisher yourself).
  static std::unique_ptr<TestWorker> Start(const std::string& id, const std::string& ns,
                                           std::shared_ptr<runtime::Discovery> discovery,
                                           int num_blocks = 256, int block_size = 4,
                                           const std::string& component = runtime::kComponentAgg) {
    auto w = std::make_unique<TestWorker>();
    w->id = id;
    KvEventPublisherOptions po;
    po.subject = runtime::KvEventsSubject(ns);
    w->publisher = std::make_shared<KvEventPublisher>(po);
    AsyncEngineOptions eo;
    eo.served_model_name = "fake";
    eo.kv_event_sink = w->publisher->sink();
    w->engine = std::make_shared<AsyncEngine>(MakeFakeEngine(num_blocks, block_size), eo);
    w->publisher->AttachEngine(w->engine);
    runtime::WorkerServerOptions so{"127.0.0.1", 0};
    so.events = w->ring;
    so.snapshot = w->publisher->snapshot_provider();
    w->server = std::make_unique<runtime::WorkerServer>(w->engine, so);
    EXPECT_TRUE(w->server->Start().ok());
    runtime::EventPlaneOptions o;
    o.worker_id = id;
    o.ring = w->ring;
    auto plane = runtime::MakeEventPlane(o);
    EXPECT_TRUE(plane.ok()) << plane.status().ToString();
    w->publisher->Start(std::shared_ptr<runtime::EventPlane>(std::move(*plane)), id);
    if (discovery) {
      runtime::InstanceInfo info;
      info.namespace_name = ns;
      info.component = component;
      info.instance_id = id;
      info.endpoint = w->server->endpoint();
      info.metadata = {{"model", "fake"}, {"max_model_len", 4096}, {"vocab_size", 512},
                       {"block_size", block_size}};
      auto lease = discovery->Register(info);
      EXPECT_TRUE(lease.ok()) << lease.status().ToString();
      if (lease.ok()) w->lease = std::move(*lease);
    }
    return w;
  }
  ~TestWorker() {
    lease.reset();
    if (server) server->Stop(200);
    publisher->Stop();
    server.reset();
    engine.reset();
  }
};

inline GenerateRequest Request(const std::string& id, std::vector<int32_t> prompt,
                               int max_tokens = 2) {
  GenerateRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  return r;
}

// prefix (len tokens from `base`) + a suffix from `salt`.
inline std::vector<int32_t> Prompt(int base, int prefix_len, int salt, int suffix_len = 6) {
  std::vector<int32_t> p;
  for (int i = 0; i < prefix_len; ++i) p.push_back((base * 37 + i) % 500 + 1);
  for (int i = 0; i < suffix_len; ++i) p.push_back((salt * 13 + i * 7) % 500 + 1);
  return p;
}

// A WorkerSelector that forwards every call to the KvRouting it wraps and records each request's
// choice ("" when the selection failed) and how many requests finished.
class RecordingSelector final : public runtime::WorkerSelector {
 public:
  explicit RecordingSelector(std::shared_ptr<runtime::KvRouting> inner) : inner_(std::move(inner)) {}
  void SetWorkers(const std::vector<runtime::InstanceInfo>& w) override { inner_->SetWorkers(w); }
  Result<std::string> Select(const GenerateRequest& r, const std::vector<std::string>& live) override {
    Result<std::string> id = inner_->Select(r, live);
    std::lock_guard<std::mutex> lock(mu_);
    chosen_[r.request_id] = id.ok() ? *id : "";
    return id;
  }
  void OnFirstOutput(const std::string& id) override { inner_->OnFirstOutput(id); }
  void OnFinished(const std::string& id) override {
    inner_->OnFinished(id);
    finished_++;
  }
  void SetLive(const std::vector<std::string>& live) override { inner_->SetLive(live); }
  std::string Chosen(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return chosen_[id];
  }
  std::atomic<int> finished_{0};

 private:
  std::shared_ptr<runtime::KvRouting> inner_;
  std::mutex mu_;
  std::map<std::string, std::string> chosen_;
};

}  // namespace tandem::worker::testing
