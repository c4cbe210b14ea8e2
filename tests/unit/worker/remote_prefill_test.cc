// The disaggregated flow in one process, over the real pieces: a prefill AsyncEngine behind a
// WorkerServer with a PrefillHandler, a decode AsyncEngine whose remote prefills go through
// DecodeDisagg -> RemotePrefillClient (gRPC on 127.0.0.1, file discovery in a private folder),
// KV written through two transfer agents with the tcp backend (loopback). Greedy tokens equal the
// golden file's; bytes moved equal blocks x layers x block bytes; failures fall back locally;
// KV blocks return to 0 on both sides.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "common/file_util.h"
#include "discovery/file_discovery.h"
#include "engine/async_engine.h"
#include "model/model_runner.h"
#include "rpc/remote_prefill_client.h"
#include "rpc/worker_server.h"
#include "transfer/agent.h"
#include "worker/decode_disagg.h"
#include "worker/prefill_handler.h"

namespace tandem::worker {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
constexpr int kBlock = 16;

std::shared_ptr<AsyncEngine> MakeEngine(int max_local, AsyncEngineOptions options) {
  auto runner = LoadCpuModelRunner(DefaultModelDir());
  EXPECT_TRUE(runner.ok()) << runner.status().ToString();
  EngineConfig c;
  c.block_size = kBlock;
  c.num_kv_blocks = 256;
  c.max_local_prefill_tokens = max_local;
  auto e = Engine::Create(std::move(runner).value(), nullptr, c);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  options.served_model_name = "tiny-qwen3";
  return std::make_shared<AsyncEngine>(std::move(e).value(), std::move(options));
}

std::unique_ptr<transfer::Agent> MakeAgent(const std::string& name,
                                           std::shared_ptr<NotificationRelay> relay = nullptr) {
  transfer::AgentOptions o;
  o.name = name;
  o.backend_override = "tcp";  // the cross-process path, even inside one process
  o.on_notification = [relay](const transfer::Notification& n) {
    if (relay) (*relay)(n);
  };
  auto a = transfer::Agent::Create(std::move(o));
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return std::move(a).value();
}

struct Collected {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
  std::string error;
};

// Submits and waits for the final output.
Collected Generate(AsyncEngine& engine, const std::string& id, std::vector<int32_t> prompt,
                   int max_tokens) {
  GenerateRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  auto result = std::make_shared<std::promise<Collected>>();
  auto acc = std::make_shared<Collected>();
  Status st = engine.Submit(std::move(r), [result, acc](RequestOutput out) {
    acc->tokens.insert(acc->tokens.end(), out.new_token_ids.begin(), out.new_token_ids.end());
    if (out.finished) {
      acc->reason = out.finish_reason;
      acc->error = out.error;
      result->set_value(*acc);
    }
  });
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto f = result->get_future();
  EXPECT_EQ(f.wait_for(120s), std::future_status::ready);
  return f.get();
}

// A prefill worker whose answers are held until the test releases them (its writes and their
// notifications do not wait).
class HeldAnswers final : public runtime::RemotePrefillHandler {
 public:
  explicit HeldAnswers(std::shared_ptr<runtime::RemotePrefillHandler> inner) : inner_(std::move(inner)) {}
  ~HeldAnswers() override { Release(); }
  void Prefill(runtime::RemotePrefillRequest request, runtime::RemotePrefillDone done) override {
    inner_->Prefill(std::move(request), [this, done](Result<runtime::RemotePrefillResult> r) {
      // Notified under the lock: WaitHeld's caller may destroy this object as soon as it sees the
      // answer, and a notify after the unlock would touch a destroyed condition variable (TSan).
      std::lock_guard<std::mutex> lock(mu_);
      held_.emplace_back(done, std::move(r));
      cv_.notify_all();
    });
  }
  void Cancel(const std::string& id) override { inner_->Cancel(id); }
  // Waits (up to 60 s) until an answer is held: the prefill and its writes are over.
  bool WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 60s, [&] { return !held_.empty(); });
  }
  void Release() {
    std::vector<std::pair<runtime::RemotePrefillDone, Result<runtime::RemotePrefillResult>>> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      held.swap(held_);
    }
    for (auto& [done, r] : held) done(std::move(r));
  }

 private:
  std::shared_ptr<runtime::RemotePrefillHandler> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<runtime::RemotePrefillDone, Result<runtime::RemotePrefillResult>>> held_;
};

// A prefill worker that records the request ids it is told to cancel.
class CancelSpy final : public runtime::RemotePrefillHandler {
 public:
  explicit CancelSpy(std::shared_ptr<runtime::RemotePrefillHandler> inner) : inner_(std::move(inner)) {}
  void Prefill(runtime::RemotePrefillRequest request, runtime::RemotePrefillDone done) override {
    inner_->Prefill(std::move(request), std::move(done));
  }
  void Cancel(const std::string& id) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_.push_back(id);
    }
    inner_->Cancel(id);
  }
  std::vector<std::string> cancelled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }

 private:
  std::shared_ptr<runtime::RemotePrefillHandler> inner_;
  mutable std::mutex mu_;
  std::vector<std::string> cancelled_;
};

bool Eventually(const std::function<bool()>& cond, std::chrono::milliseconds max) {
  const auto end = std::chrono::steady_clock::now() + max;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return cond();
}

class RemotePrefillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tandem-worker-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    runtime::FileDiscoveryOptions d;
    d.root = dir_.string();
    discovery_ = runtime::MakeFileDiscovery(d);
    auto golden = ReadJsonFile(std::string(TANDEM_GOLDEN_DIR) + "/tiny-qwen3.json");
    ASSERT_TRUE(golden.ok());
    golden_ = *golden;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The prefill worker: engine, agent with its KV registered, gRPC server registered in discovery.
  // `hold_answers`: the answers wait for held_->Release() (HeldAnswers). `spy_cancels`: the
  // cancellations it receives are recorded in spy_ (CancelSpy).
  void StartPrefill(PrefillHandlerOptions handler_options = {}, bool hold_answers = false,
                    bool spy_cancels = false) {
    prefill_engine_ = MakeEngine(0, {});
    prefill_agent_ = MakeAgent("prefill-test");
    auto regs = RegisterKVCache(*prefill_agent_, prefill_engine_->kv_cache_layout());
    ASSERT_TRUE(regs.ok());
    prefill_regs_ = std::move(*regs);
    handler_ = std::make_shared<PrefillHandler>(prefill_engine_, prefill_agent_.get(), handler_options);
    std::shared_ptr<runtime::RemotePrefillHandler> served = handler_;
    if (hold_answers) served = held_ = std::make_shared<HeldAnswers>(handler_);
    if (spy_cancels) served = spy_ = std::make_shared<CancelSpy>(served);
    server_ = std::make_unique<runtime::WorkerServer>(
        prefill_engine_, runtime::WorkerServerOptions{"127.0.0.1", 0, served});
    ASSERT_TRUE(server_->Start().ok());
    runtime::InstanceInfo info;
    info.namespace_name = "t";
    info.component = runtime::kComponentPrefill;
    info.instance_id = "p0";
    info.endpoint = server_->endpoint();
    info.metadata = {{"model", "tiny-qwen3"}};
    auto lease = discovery_->Register(info);
    ASSERT_TRUE(lease.ok());
    lease_ = std::move(*lease);
  }
  void StopPrefill() {
    lease_.reset();
    server_->Stop();
    server_.reset();
    held_.reset();
    spy_.reset();
    handler_.reset();
    prefill_regs_.clear();
    prefill_agent_.reset();
    prefill_engine_.reset();
  }

  void StartDecode(int max_local, std::chrono::milliseconds timeout = 60s) {
    auto relay = std::make_shared<NotificationRelay>();  // kv-ready notifications -> disagg_
    decode_agent_ = MakeAgent("decode-test", relay);
    runtime::RemotePrefillClientOptions co;
    co.namespace_name = "t";
    co.refresh_interval = 50ms;
    auto client = std::make_shared<runtime::RemotePrefillClient>(discovery_, co);
    // The engine is made first (its layout is needed); the dispatcher is bound through a holder.
    auto holder = std::make_shared<std::shared_ptr<DecodeDisagg>>();
    AsyncEngineOptions eo;
    eo.remote_prefill = [holder](RemotePrefillTask task,
                                 std::function<void(RemotePrefillOutcome)> done) {
      (*holder)->Start(std::move(task), std::move(done));
    };
    eo.cancel_remote_prefill = [holder](const std::string& id) { (*holder)->Cancel(id); };
    decode_engine_ = MakeEngine(max_local, eo);
    auto regs = RegisterKVCache(*decode_agent_, decode_engine_->kv_cache_layout());
    ASSERT_TRUE(regs.ok());
    decode_regs_ = std::move(*regs);
    DecodeDisaggOptions o;
    o.timeout = timeout;
    o.write_margin = timeout / 4;
    disagg_ = std::make_shared<DecodeDisagg>(decode_agent_.get(), decode_engine_->kv_cache_layout(),
                                             kBlock, client, o);
    *holder = disagg_;
    relay->Bind(disagg_);
    ASSERT_TRUE(Eventually([&] { return client->num_workers() > 0 || !server_; }, 5s));
  }
  void StopDecode() {
    disagg_->Shutdown();
    decode_regs_.clear();
    decode_agent_.reset();
    decode_engine_.reset();
    disagg_.reset();
  }

  uint64_t BytesPerBlock() {
    const KVCacheLayout& l = decode_engine_->kv_cache_layout();
    return l.block_bytes * l.layer_base.size();
  }
  // The same from the model's shape (the engines may be stopped): K and V of every layer, fp32.
  static uint64_t BytesPerBlockOf(int num_layers) {
    auto runner = LoadCpuModelRunner(DefaultModelDir());
    const ModelConfig& c = (*runner)->config();
    return static_cast<uint64_t>(2) * kBlock * c.num_key_value_heads * c.head_dim * sizeof(float) * num_layers;
  }

  fs::path dir_;
  nlohmann::json golden_;
  std::shared_ptr<runtime::Discovery> discovery_;
  std::shared_ptr<AsyncEngine> prefill_engine_, decode_engine_;
  std::unique_ptr<transfer::Agent> prefill_agent_, decode_agent_;
  std::vector<transfer::Registration> prefill_regs_, decode_regs_;
  std::shared_ptr<PrefillHandler> handler_;
  std::shared_ptr<HeldAnswers> held_;
  std::shared_ptr<CancelSpy> spy_;
  std::unique_ptr<runtime::WorkerServer> server_;
  std::unique_ptr<runtime::Lease> lease_;
  std::shared_ptr<DecodeDisagg> disagg_;
};

TEST_F(RemotePrefillTest, GoldenGreedyWithOnlyMissingBlocksMoved) {
  StartPrefill();
  StartDecode(/*max_local=*/0);
  int expected_transfers = 0;
  uint64_t expected_bytes = 0;
  for (size_t i = 0; i < golden_["generation"].size(); ++i) {
    const auto& c = golden_["generation"][i];
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto greedy = c["greedy_ids"].get<std::vector<int32_t>>();
    const auto before = disagg_->transfer_stats();
    Collected got = Generate(*decode_engine_, "g" + std::to_string(i), prompt,
                             static_cast<int>(greedy.size()));
    EXPECT_EQ(got.tokens, greedy) << "case " << i;
    const auto after = disagg_->transfer_stats();
    ASSERT_EQ(after.num_transfers, before.num_transfers + 1) << "case " << i;
    EXPECT_EQ(after.num_errors, 0u);
    // Blocks decode lacked: from its cached prefix (a multiple of the block size) to the end.
    // Unique prompts share at most the chat template's opening blocks; the moved bytes must be a
    // whole number of blocks, at most the prompt's.
    const uint64_t moved = after.bytes - before.bytes;
    const uint64_t prompt_blocks = (prompt.size() + kBlock - 1) / kBlock;
    EXPECT_EQ(moved % BytesPerBlock(), 0u);
    EXPECT_GE(moved, BytesPerBlock());
    EXPECT_LE(moved, prompt_blocks * BytesPerBlock());
    ++expected_transfers;
    expected_bytes += moved;
  }
  EXPECT_EQ(disagg_->transfer_stats().num_transfers, static_cast<uint64_t>(expected_transfers));
  // The same prompt again: every full block is cached on decode; nothing more moves.
  const auto& c0 = golden_["generation"][0];
  const auto before = disagg_->transfer_stats();
  Collected again = Generate(*decode_engine_, "again", c0["prompt_ids"].get<std::vector<int32_t>>(),
                             static_cast<int>(c0["greedy_ids"].size()));
  EXPECT_EQ(again.tokens, c0["greedy_ids"].get<std::vector<int32_t>>());
  // The uncached part is the last (partial) block at most: under max_local 0 it still goes
  // remote, but only those blocks move.
  const auto after = disagg_->transfer_stats();
  EXPECT_LE(after.bytes - before.bytes, BytesPerBlock());
  EXPECT_TRUE(Eventually([&] { return decode_engine_->Stats().engine.num_kv_blocks_used == 0; }, 5s));
  EXPECT_TRUE(Eventually([&] { return prefill_engine_->Stats().engine.num_kv_blocks_used == 0; }, 5s));
  StopDecode();
  StopPrefill();
}

TEST_F(RemotePrefillTest, SecondTurnMovesOnlyNewBlocks) {
  StartPrefill();
  StartDecode(/*max_local=*/16);
  std::vector<int32_t> turn1;
  for (int i = 0; i < 200; ++i) turn1.push_back(1000 + (i * 37) % 5000);
  Collected a = Generate(*decode_engine_, "t1", turn1, 8);
  ASSERT_EQ(a.reason, FinishReason::kLength);
  const auto s1 = disagg_->transfer_stats();
  ASSERT_EQ(s1.num_transfers, 1u);
  EXPECT_EQ(s1.bytes, ((turn1.size() + kBlock - 1) / kBlock) * BytesPerBlock());
  // Turn 2: the history (prompt + answer) and 100 new tokens.
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), a.tokens.begin(), a.tokens.end());
  for (int i = 0; i < 100; ++i) turn2.push_back(2000 + (i * 53) % 5000);
  Collected b = Generate(*decode_engine_, "t2", turn2, 8);
  ASSERT_EQ(b.reason, FinishReason::kLength);
  const auto s2 = disagg_->transfer_stats();
  ASSERT_EQ(s2.num_transfers, 2u);
  // Decode cached the full blocks of turn 1's prompt and answer (208 tokens: 13 blocks; the
  // last answer token's KV was never computed, so 207 tokens -> 12 full blocks).
  const uint64_t cached_blocks = (turn1.size() + a.tokens.size() - 1) / kBlock;
  const uint64_t total_blocks = (turn2.size() + kBlock - 1) / kBlock;
  EXPECT_EQ(s2.bytes - s1.bytes, (total_blocks - cached_blocks) * BytesPerBlock());
  // The reference: an engine without disaggregation gives the same tokens.
  StopDecode();
  auto agg = MakeEngine(0, {});
  EXPECT_EQ(Generate(*agg, "r2", turn2, 8).tokens, b.tokens);
  StopPrefill();
}

// Layer-wise transfer (the default): each layer's blocks are posted once that layer is computed,
// while later layers still compute; the decode worker gets the same KV as from one write after the
// prefill (same tokens, same bytes), and both equal an aggregated engine's tokens.
TEST_F(RemotePrefillTest, LayerwiseWritesOverlapComputeAndEqualTheWholeWrite) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 700; ++i) prompt.push_back(300 + (i * 71) % 8000);
  const int num_layers = [] {
    auto runner = LoadCpuModelRunner(DefaultModelDir());
    return runner.ok() ? (*runner)->config().num_hidden_layers : 0;
  }();
  ASSERT_GT(num_layers, 1);
  struct Run {
    std::vector<int32_t> tokens;
    uint64_t bytes = 0, layer_posts = 0, early_posts = 0;
  };
  auto run = [&](bool layerwise) {
    PrefillHandlerOptions o;
    o.layerwise = layerwise;
    StartPrefill(o);
    StartDecode(/*max_local=*/0);
    Run r;
    // Three requests: the sum of early posts does not hinge on one schedule.
    for (int i = 0; i < 3; ++i) {
      std::vector<int32_t> p = prompt;
      p[0] += i;  // no prefix shared between them
      Collected got = Generate(*decode_engine_, "lw" + std::to_string(i), p, 6);
      EXPECT_EQ(got.reason, FinishReason::kLength) << got.error;
      if (i == 0) r.tokens = got.tokens;
    }
    r.bytes = disagg_->transfer_stats().bytes;
    EXPECT_EQ(disagg_->transfer_stats().num_transfers, 3u);
    EXPECT_EQ(disagg_->num_fallbacks(), 0u);
    r.layer_posts = handler_->num_layer_posts();
    r.early_posts = handler_->num_layer_posts_before_computed();
    EXPECT_TRUE(Eventually([&] { return prefill_engine_->Stats().engine.num_kv_blocks_used == 0; }, 5s));
    StopDecode();
    StopPrefill();
    return r;
  };
  const Run layerwise = run(true);
  const Run whole = run(false);
  EXPECT_EQ(layerwise.tokens, whole.tokens);
  EXPECT_EQ(layerwise.bytes, whole.bytes);
  EXPECT_EQ(layerwise.bytes, 3 * ((prompt.size() + kBlock - 1) / kBlock) *
                                 (BytesPerBlockOf(num_layers)));
  EXPECT_EQ(layerwise.layer_posts, 3u * num_layers);  // one post per layer and request
  EXPECT_GT(layerwise.early_posts, 0u);               // some went out before the first token
  EXPECT_EQ(whole.layer_posts, 0u);
  auto agg = MakeEngine(0, {});
  EXPECT_EQ(Generate(*agg, "ref", prompt, 6).tokens, layerwise.tokens);
}

// The first token travels in the last write's kv-ready notification: decoding starts while the
// call's answer is still held, with the golden tokens; a request asking for logprobs waits for
// the answer (they do not travel in the notification).
TEST_F(RemotePrefillTest, DecodingStartsAtTheKvReadyNotification) {
  StartPrefill({}, /*hold_answers=*/true);
  StartDecode(/*max_local=*/0);
  const auto& c = golden_["generation"][2];
  const auto greedy = c["greedy_ids"].get<std::vector<int32_t>>();
  for (const bool logprobs : {false, true}) {
    GenerateRequest r;
    r.request_id = logprobs ? "with-logprobs" : "plain";
    r.prompt_token_ids = c["prompt_ids"].get<std::vector<int32_t>>();
    r.params.temperature = 0.0f;
    r.params.max_tokens = static_cast<int>(greedy.size());
    if (logprobs) r.params.logprobs = 0;
    auto first = std::make_shared<std::promise<void>>();
    auto tokens = std::make_shared<std::vector<int32_t>>();
    std::promise<void> finished;
    ASSERT_TRUE(decode_engine_->Submit(std::move(r), [&finished, first, tokens](RequestOutput out) {
      if (!out.new_token_ids.empty() && tokens->empty()) first->set_value();
      tokens->insert(tokens->end(), out.new_token_ids.begin(), out.new_token_ids.end());
      if (out.finished) finished.set_value();
    }).ok());
    ASSERT_TRUE(held_->WaitHeld());  // the prefill worker is done and its answer held
    auto got_first = first->get_future();
    if (logprobs) {
      EXPECT_EQ(got_first.wait_for(300ms), std::future_status::timeout) << "a first token without the answer";
      held_->Release();
    } else {
      EXPECT_EQ(got_first.wait_for(30s), std::future_status::ready) << "the first token waited for the answer";
      held_->Release();
    }
    ASSERT_EQ(finished.get_future().wait_for(60s), std::future_status::ready);
    EXPECT_EQ(*tokens, greedy) << (logprobs ? "with logprobs" : "plain");
    // The answer counts the transfer (one per request, no error).
    const uint64_t want = logprobs ? 2 : 1;
    EXPECT_TRUE(Eventually([&] { return disagg_->transfer_stats().num_transfers == want; }, 10s));
    EXPECT_EQ(disagg_->transfer_stats().num_errors, 0u);
  }
  EXPECT_TRUE(Eventually([&] { return decode_engine_->Stats().engine.num_kv_blocks_used == 0; }, 5s));
  StopDecode();
  StopPrefill();
}

TEST_F(RemotePrefillTest, NoPrefillWorkerFallsBackToLocalPrefill) {
  StartDecode(/*max_local=*/0);
  const auto& c = golden_["generation"][1];
  Collected got = Generate(*decode_engine_, "x", c["prompt_ids"].get<std::vector<int32_t>>(),
                           static_cast<int>(c["greedy_ids"].size()));
  EXPECT_EQ(got.tokens, c["greedy_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(disagg_->num_fallbacks(), 1u);
  EXPECT_EQ(disagg_->transfer_stats().num_errors, 1u);
  EXPECT_TRUE(Eventually([&] { return decode_engine_->Stats().engine.num_kv_blocks_used == 0; }, 5s));
  StopDecode();
}

TEST_F(RemotePrefillTest, CancelWhileRemotePrefillInFlightReturnsBlocks) {
  StartPrefill();
  StartDecode(/*max_local=*/0);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 1500; ++i) prompt.push_back(100 + (i * 91) % 9000);
  GenerateRequest r;
  r.request_id = "c";
  r.prompt_token_ids = prompt;
  r.params.temperature = 0.0f;
  r.params.max_tokens = 50;
  std::promise<FinishReason> done;
  ASSERT_TRUE(decode_engine_->Submit(std::move(r), [&done](RequestOutput out) {
    if (out.finished) done.set_value(out.finish_reason);
  }).ok());
  // Cancel while the prefill worker has the request (its engine counts it pending from Submit;
  // the KV block count only moves between steps, and 1500 tokens can be one ~0.7 s step).
  ASSERT_TRUE(Eventually([&] { return prefill_engine_->Stats().num_pending > 0; }, 20s));
  decode_engine_->Cancel("c");
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(60s), std::future_status::ready);
  EXPECT_EQ(f.get(), FinishReason::kAbort);
  EXPECT_TRUE(Eventually([&] { return decode_engine_->Stats().engine.num_kv_blocks_used == 0; }, 10s));
  EXPECT_TRUE(Eventually([&] { return prefill_engine_->Stats().engine.num_kv_blocks_used == 0; }, 10s));
  StopDecode();
  StopPrefill();
}

// A client that goes away while its prompt waits for (or is in) the prefill worker's engine:
// the cancel reaches the prefill worker, which drops the queued prompts instead of computing and
// transferring each of them; every request ends with kAbort and no block stays used on either
// side; neither a transfer error nor a fallback is counted.
TEST_F(RemotePrefillTest, ACancelledRequestStopsItsPrefillOnThePrefillWorker) {
  StartPrefill({}, /*hold_answers=*/false, /*spy_cancels=*/true);
  StartDecode(/*max_local=*/0);
  // 900 tokens (57 blocks) each: all four fit in either engine's 256 blocks; a prefill step
  // (2048 tokens) computes two of them and part of a third.
  constexpr int kRequests = 4;
  std::vector<std::future<FinishReason>> finished;
  for (int n = 0; n < kRequests; ++n) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < 900; ++i) prompt.push_back(100 + (i * 91 + n * 7) % 9000);
    GenerateRequest r;
    r.request_id = "c" + std::to_string(n);
    r.prompt_token_ids = std::move(prompt);
    r.params.temperature = 0.0f;
    r.params.max_tokens = 50;
    auto done = std::make_shared<std::promise<FinishReason>>();
    finished.push_back(done->get_future());
    ASSERT_TRUE(decode_engine_->Submit(std::move(r), [done](RequestOutput out) {
      if (out.finished) done->set_value(out.finish_reason);
    }).ok());
  }
  ASSERT_TRUE(Eventually([&] { return prefill_engine_->Stats().num_pending == kRequests; }, 20s));
  for (int n = 0; n < kRequests; ++n) decode_engine_->Cancel("c" + std::to_string(n));
  for (auto& f : finished) {
    ASSERT_EQ(f.wait_for(60s), std::future_status::ready);
    EXPECT_EQ(f.get(), FinishReason::kAbort);
  }
  std::vector<std::string> cancelled = spy_->cancelled();
  std::sort(cancelled.begin(), cancelled.end());
  EXPECT_EQ(cancelled, (std::vector<std::string>{"c0", "c1", "c2", "c3"}));
  // At most the prompts of the step running when the cancels came were computed and written.
  EXPECT_LE(disagg_->transfer_stats().num_transfers, 2u);
  EXPECT_EQ(disagg_->transfer_stats().num_errors, 0u);
  EXPECT_EQ(disagg_->num_fallbacks(), 0u);
  EXPECT_TRUE(Eventually([&] { return decode_engine_->Stats().engine.num_kv_blocks_used == 0; }, 10s));
  EXPECT_TRUE(Eventually([&] { return prefill_engine_->Stats().engine.num_kv_blocks_used == 0; }, 10s));
  StopDecode();
  StopPrefill();
}

TEST_F(RemotePrefillTest, HandlerRejectsMismatchedGeometry) {
  StartPrefill();
  runtime::RemotePrefillRequest req;
  req.request_id = "bad";
  req.prompt_token_ids = {1, 2, 3, 4};
  req.params.max_tokens = 1;
  req.target.agent_name = "nobody";
  req.target.layer_base = {0x1000};  // one layer: the model has more
  req.target.block_bytes = 4096;
  req.target.block_size = kBlock;
  req.target.block_ids = {0};
  req.write_window = 1000ms;
  std::promise<Status> got;
  handler_->Prefill(req, [&got](Result<runtime::RemotePrefillResult> r) { got.set_value(r.status()); });
  Status st = got.get_future().get();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("geometry"), std::string::npos) << st.ToString();
  // A block table too short for the prompt.
  const KVCacheLayout& l = prefill_engine_->kv_cache_layout();
  req.target.layer_base.assign(l.layer_base.size(), 0x1000);
  req.target.block_bytes = l.block_bytes;
  req.prompt_token_ids.assign(40, 7);  // 3 blocks
  std::promise<Status> got2;
  handler_->Prefill(req, [&got2](Result<runtime::RemotePrefillResult> r) { got2.set_value(r.status()); });
  Status st2 = got2.get_future().get();
  EXPECT_EQ(st2.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st2.message().find("block table"), std::string::npos) << st2.ToString();
  // A decode pool of another dtype (--kv-cache-dtype fp8 on one side only), even where the bytes
  // per block happened to agree: a clear error naming both, no KV written.
  EXPECT_EQ(l.dtype, "fp32");
  req.prompt_token_ids = {1, 2, 3, 4};
  req.target.kv_cache_dtype = "fp8_e4m3";
  std::promise<Status> got3;
  handler_->Prefill(req, [&got3](Result<runtime::RemotePrefillResult> r) { got3.set_value(r.status()); });
  Status st3 = got3.get_future().get();
  EXPECT_EQ(st3.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st3.message().find("KV cache dtype differs: the decode worker's is fp8_e4m3, this prefill worker's fp32"),
            std::string::npos) << st3.ToString();
  EXPECT_EQ(prefill_engine_->Stats().engine.num_kv_blocks_used, 0);
  StopPrefill();
}

}  // namespace
}  // namespace tandem::worker
