// MigratingEngineClient over a scripted inner EngineClient: the test plays the workers, emitting
// outputs (and failures) for each attempt the decorator submits.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "common/metrics.h"
#include "rpc/migrating_engine_client.h"

namespace tandem::runtime {
namespace {

using namespace std::chrono_literals;

// Records submissions and cancels; the test emits outputs through Emit.
class FakeInner final : public EngineClient {
 public:
  struct Submitted {
    GenerateRequest request;
    OutputCallback on_output;
  };

  Status Submit(GenerateRequest request, OutputCallback on_output) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (refuse_next_) {
      refuse_next_ = false;
      return Err(StatusCode::kFailedPrecondition, "no worker available: test");
    }
    submitted_.push_back({std::move(request), std::move(on_output)});
    cv_.notify_all();
    return Status::Ok();
  }
  void Cancel(const std::string& request_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_.push_back(request_id);
    cv_.notify_all();
  }
  EngineClientStats Stats() const override { return {}; }
  ServedModelInfo model_info() const override { return {"fake", 100, 50}; }

  bool WaitSubmitted(size_t n, std::chrono::milliseconds timeout = 5s) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return submitted_.size() >= n; });
  }
  bool WaitCancelled(size_t n, std::chrono::milliseconds timeout = 5s) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return cancelled_.size() >= n; });
  }
  Submitted At(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_.at(i);
  }
  size_t NumSubmitted() {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_.size();
  }
  std::vector<std::string> Cancelled() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }
  void RefuseNext() {
    std::lock_guard<std::mutex> lock(mu_);
    refuse_next_ = true;
  }

  // Attempt i emits tokens (not finished).
  void Tokens(size_t i, std::vector<int32_t> tokens, int num_cached = 0) {
    Submitted s = At(i);
    RequestOutput out;
    out.request_id = s.request.request_id;
    out.new_token_ids = std::move(tokens);
    out.new_text = "t";
    out.num_prompt_tokens = static_cast<int>(s.request.prompt_token_ids.size());
    out.num_cached_tokens = num_cached;
    s.on_output(std::move(out));
  }
  void Finish(size_t i, FinishReason reason, std::vector<int32_t> tokens = {},
              bool worker_lost = false, std::string error = "") {
    Submitted s = At(i);
    RequestOutput out;
    out.request_id = s.request.request_id;
    out.new_token_ids = std::move(tokens);
    out.finished = true;
    out.finish_reason = reason;
    out.worker_lost = worker_lost;
    out.error = std::move(error);
    out.num_prompt_tokens = static_cast<int>(s.request.prompt_token_ids.size());
    s.on_output(std::move(out));
  }
  void Lose(size_t i) {
    Finish(i, FinishReason::kError, {}, true,
           "worker w" + std::to_string(i) + " (127.0.0.1:1) went away during the request");
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Submitted> submitted_;
  std::vector<std::string> cancelled_;
  bool refuse_next_ = false;
};

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<RequestOutput> outputs;
  int num_finished = 0;

  OutputCallback Callback() {
    return [this](RequestOutput out) {
      std::lock_guard<std::mutex> lock(mu);
      num_finished += out.finished;
      outputs.push_back(std::move(out));
      cv.notify_all();
    };
  }
  bool WaitFinished(std::chrono::milliseconds timeout = 5s) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [this] { return num_finished > 0; });
  }
  std::vector<int32_t> Tokens() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<int32_t> all;
    for (const auto& o : outputs) all.insert(all.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    return all;
  }
  RequestOutput Last() {
    std::lock_guard<std::mutex> lock(mu);
    return outputs.back();
  }
};

GenerateRequest MakeRequest(int max_tokens = 10) {
  GenerateRequest r;
  r.request_id = "r";
  r.prompt_token_ids = {1, 2, 3};
  r.params.max_tokens = max_tokens;
  r.params.temperature = 0.7f;
  r.params.seed = 42;
  r.params.stop = {"END"};
  r.params.stop_token_ids = {7};
  return r;
}

struct Fixture {
  std::shared_ptr<FakeInner> inner = std::make_shared<FakeInner>();
  metrics::Registry registry;
  int num_before_retry = 0;
  std::unique_ptr<MigratingEngineClient> client;

  explicit Fixture(int limit, std::function<void()> before = nullptr) {
    MigratingEngineClientOptions o;
    o.migration_limit = limit;
    o.registry = &registry;
    o.before_retry = [this, before] {
      ++num_before_retry;
      if (before) before();
    };
    client = std::make_unique<MigratingEngineClient>(inner, o);
  }
  double Migrations() {
    return registry.GetCounter("tandem_request_migrations_total", "").value();
  }
};

TEST(MigratingEngineClientTest, ForwardsAStreamWithoutFailures) {
  Fixture f(2);
  Collector c;
  ASSERT_TRUE(f.client->Submit(MakeRequest(), c.Callback()).ok());
  ASSERT_TRUE(f.inner->WaitSubmitted(1));
  EXPECT_EQ(f.inner->At(0).request.request_id, "r");
  f.inner->Tokens(0, {10, 11}, /*num_cached=*/2);
  f.inner->Finish(0, FinishReason::kStop, {12});
  ASSERT_TRUE(c.WaitFinished());
  EXPECT_EQ(c.Tokens(), (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(c.Last().finish_reason, FinishReason::kStop);
  EXPECT_EQ(c.Last().num_output_tokens, 3);
  EXPECT_EQ(c.Last().num_cached_tokens, 2);
  EXPECT_EQ(c.num_finished, 1);
  EXPECT_EQ(f.inner->NumSubmitted(), 1u);
  EXPECT_EQ(f.Migrations(), 0);
}

TEST(MigratingEngineClientTest, ResubmitsWithTheStreamedTokensAfterALostWorker) {
  Fixture f(2);
  Collector c;
  ASSERT_TRUE(f.client->Submit(MakeRequest(10), c.Callback()).ok());
  ASSERT_TRUE(f.inner->WaitSubmitted(1));
  f.inner->Tokens(0, {10}, /*num_cached=*/1);
  f.inner->Tokens(0, {11});
  f.inner->Lose(0);
  ASSERT_TRUE(f.inner->WaitSubmitted(2));
  const GenerateRequest again = f.inner->At(1).request;
  EXPECT_EQ(again.request_id, "r#m1");
  EXPECT_EQ(again.prompt_token_ids, (std::vector<int32_t>{1, 2, 3, 10, 11}));
  EXPECT_EQ(again.params.max_tokens, 8);
  EXPECT_FLOAT_EQ(again.params.temperature, 0.7f);
  EXPECT_EQ(again.params.seed, std::optional<uint64_t>(42));
  EXPECT_EQ(again.params.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(again.params.stop_token_ids, std::vector<int32_t>{7});
  EXPECT_EQ(c.num_finished, 0) << "the lost attempt's error must not reach the caller";

  f.inner->Tokens(1, {12}, /*num_cached=*/4);
  f.inner->Finish(1, FinishReason::kLength, {13});
  ASSERT_TRUE(c.WaitFinished());
  EXPECT_EQ(c.Tokens(), (std::vector<int32_t>{10, 11, 12, 13}));
  const RequestOutput last = c.Last();
  EXPECT_EQ(last.request_id, "r");
  EXPECT_EQ(last.finish_reason, FinishReason::kLength);
  EXPECT_EQ(last.num_prompt_tokens, 3);
  EXPECT_EQ(last.num_cached_tokens, 1) << "the first attempt's";
  EXPECT_EQ(last.num_output_tokens, 4);
  EXPECT_EQ(c.num_finished, 1);
  for (const auto& o : c.outputs) EXPECT_EQ(o.request_id, "r");
  EXPECT_EQ(f.Migrations(), 1);
  EXPECT_EQ(f.client->num_migrations(), 1u);
  EXPECT_EQ(f.num_before_retry, 1);
}

TEST(MigratingEngineClientTest, TokensOnTheLostFinalOutputAreStreamedAndCounted) {
  Fixture f(1);
  Collector c;
  ASSERT_TRUE(f.client->Submit(MakeRequest(5), c.Callback()).ok());
  ASSERT_TRUE(f.inner->WaitSubmitted(1));
  f.inner->Finish(0, FinishReason::kError, {10, 11}, /*worker_lost=*/true, "worker w0 went away");
  ASSERT_TRUE(f.inner->WaitSubmitted(2));
  EXPECT_EQ(f.inner->At(1).request.prompt_token_ids, (std::vector<int32_t>{1, 2, 3, 10, 11}));
  EXPECT_EQ(f.inner->At(1).request.params.max_tokens, 3);
  f.inner->Finish(1, FinishReason::kStop, {12});
  ASSERT_TRUE(c.WaitFinished());
  EXPECT_EQ(c.Tokens(), (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(c.Last().num_output_tokens, 3);
}

TEST(MigratingEngineClientTest, EngineErrorsAreNotMigrated) {
  Fixture f(3);
  Collector c;
  ASSERT_TRUE(f.client->Submit(MakeRequest(), c.Callback()).ok());
  ASSERT_TRUE(f.inner->WaitSubmitted(1));
  f.inner->Tokens(0, {10});
  f.inner->Finish(0, FinishReason::kError, {}, /*worker_lost=*/false, "deadline exceeded");
  ASSERT_TRUE(c.WaitFinished());
  EXPECT_EQ(c.Last().finish_reason, FinishReason::kError);
  EXPECT_EQ(c.Last().error, "deadline exceeded");
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(f.inner->NumSubmitted(), 1u);
  EXPECT_EQ(f.Migrations(), 0);
}

TEST(MigratingEngineClientTest, LimitZeroPassesTheErrorThrough) {
  Fixture f(0);
  Collector c;
  ASSERT_TRUE(f.client->Submit(MakeRequest(), c.Callback()).ok());
  ASSERT_TRUE(f.inner->WaitSubmitted(1));
  f.inner->Tokens(0, {10});
  f.inner->Lose(0);
  ASSERT_TRUE(c.WaitFinished());
  EXPECT_EQ(c.Last().finish_reason, FinishReason::kError);
  EXPECT_EQ(c.Last().error, "worker w0 (127.0.0.1:1) went away during the request");
  EXPECT_TRUE(c.Last().worker_lost);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(f.inner->NumSubmitted(), 1u);
}

TEST(MigratingEngineClientTest, StopsAtTheLimit) {
  Fixture f(2);
  Collector c;
  ASSERT_TRUE(f.client->Submit(MakeRequest(10), c.Callback()).ok());
  ASSERT_TRUE(f.inner->WaitSubmitted(1));
  f.inner->Tokens(0, {10});
  f.inner->Lose(0);
  ASSERT_TRUE(f.inner->WaitSubmitted(2));
  f.inner->Tokens(1, {11});
  f.inner->Lose(1);
  ASSERT_TRUE(f.inner->WaitSubmitted(3));
  const GenerateRequest third = f.inner->At(2).request;
  EXPECT_EQ(third.request_id, "r#m2");
  EXPECT_EQ(third.prompt_token_ids, (std::vector<int32_t>{1, 2, 3, 10, 11}));
  EXPECT_EQ(third.params.max_tokens, 8);
  f.inner->Lose(2);
  ASSERT_TRUE(c.WaitFinished());
  const RequestOutput last = c.Last();
  EXPECT_EQ(last.finish_reason, FinishReason::kError);
  EXPECT_NE(last.error.find("worker w2"), std::string::npos) << last.error;
  EXPECT_NE(last.error.find("--migration-limit 2"), std::string::npos) << last.error;
  EXPECT_EQ(last.num_output_tokens, 2);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(f.inner->NumSubmitted(), 3u);
  EXPECT_EQ(c.num_finished, 1);
  EXPECT_EQ(f.Migrations(), 2);
}

TEST(MigratingEngineClientTest, AllTokensStreamedBeforeTheLossFinishesWithLength) {
  Fixture f(1);
  Collector c;
  ASSERT_TRUE(f.client->Submit(MakeRequest(2), c.Callback()).ok());
  ASSERT_TRUE(f.inner->WaitSubmitted(1));
  f.inner->Tokens(0, {10, 11});
  f.inner->Lose(0);
  ASSERT_TRUE(c.WaitFinished());
  EXPECT_EQ(c.Last().finish_reason, FinishReason::kLength);
  EXPECT_TRUE(c.Last().error.empty());
  EXPECT_EQ(f.inner->NumSubmitted(), 1u);
}

TEST(MigratingEngineClientTest, CancelWhileWaitingForTheRetryAborts) {
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool entered = false, open = false;
  Fixture f(2, [&] {
    std::unique_lock<std::mutex> lock(gate_mu);
    entered = true;
    gate_cv.notify_all();
    gate_cv.wait(lock, [&] { return open; });
  });
  Collector c;
  ASSERT_TRUE(f.client->Submit(MakeRequest(), c.Callback()).ok());
  ASSERT_TRUE(f.inner->WaitSubmitted(1));
  f.inner->Tokens(0, {10});
  f.inner->Lose(0);
  {
    std::unique_lock<std::mutex> lock(gate_mu);
    ASSERT_TRUE(gate_cv.wait_for(lock, 5s, [&] { return entered; }));
  }
  f.client->Cancel("r");
  {
    std::lock_guard<std::mutex> lock(gate_mu);
    open = true;
  }
  gate_cv.notify_all();
  ASSERT_TRUE(c.WaitFinished());
  EXPECT_EQ(c.Last().finish_reason, FinishReason::kAbort);
  EXPECT_EQ(c.Last().num_output_tokens, 1);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(f.inner->NumSubmitted(), 1u);
  EXPECT_EQ(c.num_finished, 1);
}

TEST(MigratingEngineClientTest, CancelReachesTheLiveAttempt) {
  Fixture f(2);
  Collector c;
  ASSERT_TRUE(f.client->Submit(MakeRequest(), c.Callback()).ok());
  ASSERT_TRUE(f.inner->WaitSubmitted(1));
  f.client->Cancel("r");
  ASSERT_TRUE(f.inner->WaitCancelled(1));
  EXPECT_EQ(f.inner->Cancelled().back(), "r");
  // A lost worker after the cancel is not migrated.
  f.inner->Lose(0);
  ASSERT_TRUE(c.WaitFinished());
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(f.inner->NumSubmitted(), 1u);

  Collector c2;
  GenerateRequest r2 = MakeRequest();
  r2.request_id = "s";
  ASSERT_TRUE(f.client->Submit(r2, c2.Callback()).ok());
  ASSERT_TRUE(f.inner->WaitSubmitted(2));
  f.inner->Tokens(1, {10});
  f.inner->Lose(1);
  ASSERT_TRUE(f.inner->WaitSubmitted(3));
  f.client->Cancel("s");
  ASSERT_TRUE(f.inner->WaitCancelled(2));
  EXPECT_EQ(f.inner->Cancelled().back(), "s#m1");
  f.inner->Finish(2, FinishReason::kAbort);
  ASSERT_TRUE(c2.WaitFinished());
  EXPECT_EQ(c2.Last().finish_reason, FinishReason::kAbort);
  EXPECT_EQ(c2.Last().request_id, "s");
  EXPECT_EQ(c2.num_finished, 1);
}

TEST(MigratingEngineClientTest, RefusedResubmissionEndsWithTheLostWorkersError) {
  Fixture f(2);
  Collector c;
  ASSERT_TRUE(f.client->Submit(MakeRequest(), c.Callback()).ok());
  ASSERT_TRUE(f.inner->WaitSubmitted(1));
  f.inner->Tokens(0, {10});
  f.inner->RefuseNext();
  f.inner->Lose(0);
  ASSERT_TRUE(c.WaitFinished());
  const RequestOutput last = c.Last();
  EXPECT_EQ(last.finish_reason, FinishReason::kError);
  EXPECT_NE(last.error.find("worker w0"), std::string::npos) << last.error;
  EXPECT_NE(last.error.find("no worker available"), std::string::npos) << last.error;
  EXPECT_EQ(c.num_finished, 1);
  EXPECT_EQ(f.Migrations(), 0);
}

TEST(MigratingEngineClientTest, DuplicateIdsAreRefusedAndIdsAreReusableAfterTheEnd) {
  Fixture f(1);
  Collector c, c2, c3;
  ASSERT_TRUE(f.client->Submit(MakeRequest(), c.Callback()).ok());
  EXPECT_EQ(f.client->Submit(MakeRequest(), c2.Callback()).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(f.inner->WaitSubmitted(1));
  f.inner->Finish(0, FinishReason::kStop, {10});
  ASSERT_TRUE(c.WaitFinished());
  EXPECT_TRUE(f.client->Submit(MakeRequest(), c3.Callback()).ok());
  EXPECT_EQ(f.client->model_info().name, "fake");
}

}  // namespace
}  // namespace tandem::runtime
