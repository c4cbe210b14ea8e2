// EchoEngineClient: an EngineClient with no model (Dynamo's "echo" engine). Each request streams
// its prompt tokens back, cycling, one token per output, `token_delay` apart, until max_tokens
// (finish "length"). For measuring and testing everything in front of the engine: the HTTP layer,
// the OpenAI protocol, SSE, routing.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "engine/engine_client.h"
#include "tokenizer/tokenizer.h"

namespace tandem {

class EchoEngineClient final : public EngineClient {
 public:
  // `tokenizer` may be null (then outputs carry no text).
  EchoEngineClient(std::shared_ptr<const Tokenizer> tokenizer, ServedModelInfo info,
                   std::chrono::microseconds token_delay = std::chrono::microseconds(0));
  ~EchoEngineClient() override;  // unfinished requests get a final kAbort output

  Status Submit(GenerateRequest request, OutputCallback on_output) override;
  void Cancel(const std::string& request_id) override;
  EngineClientStats Stats() const override;
  ServedModelInfo model_info() const override { return info_; }

 private:
  struct Active;
  void Loop();

  std::shared_ptr<const Tokenizer> tokenizer_;
  ServedModelInfo info_;
  std::chrono::microseconds token_delay_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::unordered_map<std::string, std::shared_ptr<Active>> active_;
  std::thread thread_;
};

}  // namespace tandem
