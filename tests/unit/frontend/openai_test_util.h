// Test doubles for the OpenAI layer: a scripted EngineClient that answers on its own threads, a
// ResponseWriter that records what a handler writes, and a fixture that runs handlers on an
// io_context with the bundled model's real tokenizer and chat template.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/template.h"
#include "common/file_util.h"
#include "common/metrics.h"
#include "engine/engine_client.h"
#include "frontend/http.h"
#include "frontend/openai_server.h"
#include "tokenizer/tokenizer.h"

namespace tandem::testing {

namespace asio = boost::asio;
using json = nlohmann::json;

// What the fake engine does with every request.
struct FakeScript {
  std::vector<int32_t> tokens;                         // one output per token
  FinishReason end_reason = FinishReason::kStop;       // when the tokens run out
  std::chrono::milliseconds delay{0};                  // before each output
  bool hang = false;             // after the tokens, wait for Cancel (then kAbort)
  std::optional<int> fail_after;  // a final kError output after this many tokens
  std::string error = "fake engine failure";  // its text
  bool worker_lost = false;                    // and its RequestOutput::worker_lost
  Status refusal;                              // and its RequestOutput::refusal
  std::optional<Status> submit_error;
  int num_cached_tokens = 0;
};

class FakeEngineClient final : public EngineClient {
 public:
  FakeEngineClient(std::shared_ptr<const Tokenizer> tokenizer, int max_model_len)
      : tokenizer_(std::move(tokenizer)), max_model_len_(max_model_len) {}
  ~FakeEngineClient() override { JoinAll(); }

  FakeScript script;

  Status Submit(GenerateRequest request, OutputCallback on_output) override {
    std::lock_guard<std::mutex> lock(mu_);
    submitted_.push_back(request);
    if (script.submit_error) return *script.submit_error;
    auto cancelled = std::make_shared<std::atomic<bool>>(false);
    cancel_flags_[request.request_id] = cancelled;
    threads_.emplace_back([this, request = std::move(request), cb = std::move(on_output),
                           cancelled, s = script]() mutable {
      Run(request, std::move(cb), *cancelled, s);
    });
    return Status::Ok();
  }
  void Cancel(const std::string& request_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_.push_back(request_id);
    auto it = cancel_flags_.find(request_id);
    if (it != cancel_flags_.end()) *it->second = true;
  }
  EngineClientStats Stats() const override {
    EngineClientStats s;
    s.engine.num_kv_blocks_total = 100;
    s.engine.num_kv_blocks_used = 7;
    s.engine.num_running = 2;
    s.engine.num_waiting = 1;
    s.engine.prefix_cache_queries = 10;
    s.engine.prefix_cache_hits = 4;
    return s;
  }
  ServedModelInfo model_info() const override {
    return {"tiny-qwen3", max_model_len_, tokenizer_->vocab_size()};
  }

  void JoinAll() {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }
  std::vector<GenerateRequest> submitted() {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_;
  }
  std::vector<std::string> cancelled() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }

 private:
  void Run(const GenerateRequest& req, OutputCallback cb, std::atomic<bool>& cancelled,
           const FakeScript& s) {
    IncrementalDetokenizer detok(tokenizer_, req.params.skip_special_tokens);
    const int prompt_len = static_cast<int>(req.prompt_token_ids.size());
    auto base = [&](int num_out) {
      RequestOutput o;
      o.request_id = req.request_id;
      o.num_prompt_tokens = prompt_len;
      o.num_cached_tokens = s.num_cached_tokens;
      o.num_output_tokens = num_out;
      return o;
    };
    int i = 0;
    for (;; ++i) {
      std::this_thread::sleep_for(s.delay);
      if (cancelled) break;
      if (s.fail_after && i == *s.fail_after) {
        RequestOutput o = base(i);
        o.finished = true;
        o.finish_reason = FinishReason::kError;
        o.error = s.error;
        o.worker_lost = s.worker_lost;
        o.refusal = s.refusal;
        cb(std::move(o));
        return;
      }
      if (i >= static_cast<int>(s.tokens.size())) break;
      RequestOutput o = base(i + 1);
      int32_t t = s.tokens[i];
      o.new_token_ids = {t};
      o.new_text = detok.Push(t);
      if (req.params.logprobs >= 0) {
        TokenLogprob lp;
        lp.token_id = t;
        lp.logprob = -0.25f * static_cast<float>(i + 1);
        for (int k = 0; k < req.params.logprobs; ++k)
          lp.top.emplace_back(k == 0 ? t : t + k, lp.logprob - static_cast<float>(k));
        o.new_logprobs.push_back(lp);
      }
      bool last_token = i + 1 == static_cast<int>(s.tokens.size());
      bool at_limit = i + 1 >= req.params.max_tokens;
      if (at_limit || (last_token && !s.hang)) {
        o.new_text += detok.Flush();
        o.finished = true;
        o.finish_reason = at_limit ? FinishReason::kLength : s.end_reason;
        cb(std::move(o));
        return;
      }
      cb(std::move(o));
    }
    // Hanging (or cancelled): wait, bounded, for Cancel.
    for (int k = 0; k < 5000 && !cancelled; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    RequestOutput o = base(i);
    o.finished = true;
    o.finish_reason = FinishReason::kAbort;
    cb(std::move(o));
  }

  std::shared_ptr<const Tokenizer> tokenizer_;
  int max_model_len_;
  std::mutex mu_;
  std::vector<GenerateRequest> submitted_;
  std::vector<std::string> cancelled_;
  std::unordered_map<std::string, std::shared_ptr<std::atomic<bool>>> cancel_flags_;
  std::vector<std::thread> threads_;
};

class FakeWriter final : public http::ResponseWriter {
 public:
  explicit FakeWriter(asio::any_io_executor ex) : ex_(std::move(ex)) {}

  int status = 0;
  std::string content_type;
  std::map<std::string, std::string> headers;
  std::string body;                 // WriteFull's body, or the chunks joined
  std::vector<std::string> chunks;  // WriteChunk calls
  int num_full = 0, num_start = 0;
  bool ended = false;
  int fail_chunk = -1;  // WriteChunk number `fail_chunk` (0-based) finds the client gone

  asio::awaitable<bool> WriteFull(int st, std::string ct, std::string b,
                                  std::map<std::string, std::string> h) override {
    ++num_full;
    status = st, content_type = std::move(ct), body = std::move(b), headers = std::move(h);
    co_return !gone_;
  }
  asio::awaitable<bool> StartStream(int st, std::string ct,
                                    std::map<std::string, std::string> h) override {
    ++num_start;
    status = st, content_type = std::move(ct), headers = std::move(h);
    co_return !gone_;
  }
  asio::awaitable<bool> WriteChunk(std::string data) override {
    if (fail_chunk >= 0 && static_cast<int>(chunks.size()) >= fail_chunk) Disconnect();
    if (gone_) co_return false;
    chunks.push_back(data);
    body += data;
    co_return true;
  }
  asio::awaitable<void> EndStream() override {
    ended = true;
    co_return;
  }
  bool client_gone() const override { return gone_; }
  void OnDisconnect(std::function<void()> cb) override {
    if (gone_) asio::post(ex_, std::move(cb));
    else callbacks_.push_back(std::move(cb));
  }
  asio::any_io_executor executor() const override { return ex_; }

  // The peer closes its side: callbacks run on the executor.
  void Disconnect() {
    if (gone_) return;
    gone_ = true;
    for (auto& cb : callbacks_) asio::post(ex_, std::move(cb));
    callbacks_.clear();
  }

  // The SSE events of a stream: JSON values, and whether "[DONE]" ended it.
  std::vector<json> Events(bool* done = nullptr) const {
    std::vector<json> events;
    if (done) *done = false;
    size_t pos = 0;
    while (pos < body.size()) {
      size_t end = body.find("\n\n", pos);
      EXPECT_NE(end, std::string::npos) << "unterminated event";
      if (end == std::string::npos) break;
      std::string line = body.substr(pos, end - pos);
      pos = end + 2;
      EXPECT_EQ(line.rfind("data: ", 0), 0u) << line;
      std::string data = line.substr(6);
      EXPECT_FALSE(done && *done) << "event after [DONE]";
      if (data == "[DONE]") {
        if (done) *done = true;
        continue;
      }
      events.push_back(json::parse(data));
    }
    return events;
  }
  json Json() const { return json::parse(body); }

 private:
  asio::any_io_executor ex_;
  bool gone_ = false;
  std::vector<std::function<void()>> callbacks_;
};

class OpenAITest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (tokenizer_) return;
    auto t = Tokenizer::Load(DefaultModelDir());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tokenizer_ = *t;
    auto r = ChatRenderer::Load(DefaultModelDir());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    renderer_ = std::make_shared<const ChatRenderer>(std::move(*r));
  }

  void SetUp() override { Make(); }
  void TearDown() override {
    if (engine) engine->JoinAll();
  }

  void Make(OpenAIServiceOptions options = {}, int max_model_len = 256) {
    if (engine) engine->JoinAll();
    service.reset();
    registry = std::make_unique<metrics::Registry>();
    engine = std::make_shared<FakeEngineClient>(tokenizer_, max_model_len);
    engine->script.tokens = tokenizer_->Encode("Hello, wörld! 世界 🎉 ok.");
    service = std::make_unique<OpenAIService>(engine, tokenizer_, renderer_, options, registry.get());
  }

  // Runs `handler` on the io_context until it returns (bounded); `before` may tweak the writer.
  std::unique_ptr<FakeWriter> Call(const http::Handler& handler, http::Request req,
                                   const std::function<void(FakeWriter&)>& before = {}) {
    auto w = std::make_unique<FakeWriter>(ioc.get_executor());
    if (before) before(*w);
    auto guard = asio::make_work_guard(ioc);
    bool done = false;
    std::exception_ptr error;
    asio::co_spawn(ioc, handler(req, *w), [&](std::exception_ptr e) {
      done = true;
      error = e;
      guard.reset();
    });
    ioc.restart();
    ioc.run_for(std::chrono::seconds(20));
    EXPECT_TRUE(done) << "handler did not finish";
    if (error) std::rethrow_exception(error);
    ioc.restart();
    ioc.poll();  // whatever the handler left posted (disconnect callbacks)
    return w;
  }

  std::unique_ptr<FakeWriter> Post(const std::string& path, const std::string& body,
                                   std::map<std::string, std::string> headers = {},
                                   const std::function<void(FakeWriter&)>& before = {}) {
    http::Request req;
    req.method = "POST";
    req.target = path;
    req.headers = std::move(headers);
    req.body = body;
    return Call(path == "/v1/completions" ? service->Completions() : service->ChatCompletions(),
                req, before);
  }
  std::unique_ptr<FakeWriter> Chat(const json& body) { return Post("/v1/chat/completions", body.dump()); }
  std::unique_ptr<FakeWriter> Complete(const json& body) { return Post("/v1/completions", body.dump()); }

  static json UserMessages(const std::string& text) {
    return json::array({json{{"role", "user"}, {"content", text}}});
  }
  std::string ScriptText() const { return tokenizer_->Decode(engine->script.tokens, true); }

  static inline std::shared_ptr<const Tokenizer> tokenizer_;
  static inline std::shared_ptr<const ChatRenderer> renderer_;
  asio::io_context ioc;  // declared first: destroyed after the engine and service
  std::unique_ptr<metrics::Registry> registry;
  std::shared_ptr<FakeEngineClient> engine;
  std::unique_ptr<OpenAIService> service;
};

}  // namespace tandem::testing
