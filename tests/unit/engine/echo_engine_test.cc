// EchoEngineClient: streams the prompt back cyclically up to max_tokens; cancel ends with kAbort;
// destruction aborts what is left; the text is the tokenizer's decoding of the echoed ids.
#include "engine/echo_engine.h"

#include <chrono>
#include <condition_variable>
#include <mutex>

#include <gtest/gtest.h>

#include "common/file_util.h"

namespace tandem {
namespace {

using namespace std::chrono_literals;

struct Sink {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> ids;
  std::string text;
  FinishReason reason = FinishReason::kNone;
  OutputCallback Callback() {
    return [this](RequestOutput out) {
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(ids.end(), out.new_token_ids.begin(), out.new_token_ids.end());
      text += out.new_text;
      if (out.finished) {
        reason = out.finish_reason;
        cv.notify_all();
      }
    };
  }
  bool Wait() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 5s, [&] { return reason != FinishReason::kNone; });
  }
};

TEST(EchoEngine, EchoesThePromptCyclicallyWithText) {
  auto tok = Tokenizer::Load(DefaultModelDir());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EchoEngineClient echo(*tok, {"echo", 4096, (*tok)->vocab_size()});
  auto prompt = (*tok)->Encode("The jury said");
  ASSERT_EQ(prompt.size(), 3u);
  Sink sink;
  GenerateRequest r{"a", prompt, {}};
  r.params.max_tokens = 7;
  ASSERT_TRUE(echo.Submit(r, sink.Callback()).ok());
  ASSERT_TRUE(sink.Wait());
  std::vector<int32_t> want;
  for (int i = 0; i < 7; ++i) want.push_back(prompt[i % 3]);
  EXPECT_EQ(sink.ids, want);
  EXPECT_EQ(sink.text, (*tok)->Decode(want));
  EXPECT_EQ(sink.reason, FinishReason::kLength);
  EXPECT_EQ(echo.Submit({"b", {}, {}}, sink.Callback()).code(), StatusCode::kInvalidArgument);
}

TEST(EchoEngine, CancelAndShutdownAbort) {
  Sink cancelled, left;
  {
    EchoEngineClient echo(nullptr, {"echo", 0, 100}, 1ms);
    GenerateRequest r{"c", {1, 2}, {}};
    r.params.max_tokens = 1000000;
    ASSERT_TRUE(echo.Submit(r, cancelled.Callback()).ok());
    r.request_id = "d";
    ASSERT_TRUE(echo.Submit(r, left.Callback()).ok());
    std::this_thread::sleep_for(10ms);
    echo.Cancel("c");
    ASSERT_TRUE(cancelled.Wait());
    EXPECT_EQ(cancelled.reason, FinishReason::kAbort);
  }
  EXPECT_EQ(left.reason, FinishReason::kAbort);
}

}  // namespace
}  // namespace tandem
