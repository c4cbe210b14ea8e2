// AsyncEngine: an Engine driven by its own thread, as an EngineClient (thread-safe).
//
// Submit validates at once (Engine::ValidateRequest) and queues; the engine thread adds queued
// requests and cancellations between steps, runs Step() while there is work, and calls each
// request's OutputCallback on the engine thread. A cancelled request ends within one step.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "engine/engine.h"
#include "engine/engine_client.h"

namespace tandem {

struct AsyncEngineOptions {
  std::string served_model_name;
  // Requests waiting for a running slot at most: Submit answers ResourceExhausted once the
  // unfinished requests reach the engine's max_num_seqs plus this (a burst fills the running
  // slots first, whatever the engine thread has admitted so far).
  int max_waiting_requests = 256;
};

class AsyncEngine final : public EngineClient {
 public:
  AsyncEngine(std::unique_ptr<Engine> engine, AsyncEngineOptions options);
  ~AsyncEngine() override;  // stops the thread; unfinished requests get a final kAbort output

  Status Submit(GenerateRequest request, OutputCallback on_output) override;
  void Cancel(const std::string& request_id) override;
  EngineClientStats Stats() const override;
  ServedModelInfo model_info() const override;

 private:
  void Loop();

  std::unique_ptr<Engine> engine_;
  AsyncEngineOptions options_;
  ServedModelInfo info_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::deque<GenerateRequest> inbox_;          // submitted, not yet added to the engine
  std::vector<std::string> cancels_;           // to abort before the next step
  std::unordered_map<std::string, OutputCallback> callbacks_;  // every unfinished request
  EngineStats last_stats_;                     // after the last step
  std::thread thread_;
};

}  // namespace tandem
