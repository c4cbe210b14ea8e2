// Disaggregated serving when prefill workers fail or are missing, as real processes on 127.0.0.1
// (the fixture: disagg_fixture.h; the reference texts come from the aggregated server shared with
// disagg_test.cc):
//   - kill -9 of the prefill worker while it computes: the request falls back to local prefill
//     (aggregated text) or fails with a clear error, within its deadline; a restarted prefill
//     worker serves the next long prompt remotely; KV blocks return to 0 on both workers;
//   - a decode worker without any prefill worker serves long prompts locally (aggregated text).
#include "disagg_fixture.h"

namespace tandem::disagg_it {
namespace {

TEST_F(DisaggTest, AKilledPrefillWorkerFallsBackLocallyAndARestartedOneServes) {
  StartWorkers(/*with_prefill=*/true, /*max_local_prefill_tokens=*/64,
               {"--remote-prefill-timeout-s", "30"});
  // The long golden prompts (1500, then 3500 tokens, should the first finish before the kill),
  // then fresh 3400-token prompts (the 3500 one shifted by 1, 2 tokens: no prefix hit) killed
  // sooner: on an idle machine the 3500 tokens take ~270 ms, under the first delay.
  bool killed_in_flight = false;
  constexpr int kKillDelayMs[] = {300, 300, 100, 30};
  for (int attempt = 0; attempt < 4 && !killed_in_flight; ++attempt) {
    if (attempt > 0) StartPrefill();
    SCOPED_TRACE("attempt " + std::to_string(attempt));
    const json body = CompletionBody(attempt < 2 ? LongGolden()[attempt]["prompt"]
                                                 : LongIds(1, attempt - 1, attempt - 1 + 3400), 16);
    const std::string want = Reference(body);
    ASSERT_FALSE(want.empty());
    const DecodeMetrics before = Decode();
    constexpr const char* kAfterKv = "remote prefill call failed after its KV arrived";
    const int after_kv_before = CountOf(DecodeLog(), kAfterKv);
    const std::string name = "long-" + std::to_string(attempt);
    const auto sent = std::chrono::steady_clock::now();
    ChildProcess* curl = StartCurl(name, body, 90);
    // The remote prefill started: the decode worker reserved the prompt's blocks and called the
    // prefill worker (~1 s of compute for 1500 tokens here; its own gauges only change after the
    // engine step, so they cannot show it). Kill it kKillDelayMs into the call.
    ASSERT_TRUE(Eventually([&] { return Decode().blocks_used > 0; }, 30s)) << Logs();
    std::this_thread::sleep_for(std::chrono::milliseconds(kKillDelayMs[attempt]));
    prefill_->Signal(SIGKILL);
    ASSERT_TRUE(prefill_->WaitExit(5s));
    const auto killed = std::chrono::steady_clock::now();
    // Done well within its deadline (frontend 60 s, remote prefill 30 s).
    ASSERT_TRUE(curl->WaitExit(60s)) << Logs();
    const auto finished = std::chrono::steady_clock::now();
    const DecodeMetrics after = Decode();
    const std::string code = ReadText(dir_ / (name + ".code"));
    const std::string out = ReadText(dir_ / (name + ".out"));
    std::cerr << "attempt " << attempt << ": killed "
              << std::chrono::duration<double>(killed - sent).count() << " s after sending, done "
              << std::chrono::duration<double>(finished - killed).count() << " s later: " << code
              << "\n";
    if (after.transfers > before.transfers || CountOf(DecodeLog(), kAfterKv) > after_kv_before) {
      // The prefill finished first, or the kill came after its KV had arrived (the decode worker
      // goes on with it): not the case under test; try again, sooner.
      EXPECT_EQ(code, "200");
      EXPECT_EQ(ResponseText(out), want);
      continue;
    }
    killed_in_flight = true;
    EXPECT_EQ(after.transfers, before.transfers);
    if (code == "200") {
      // Local fallback: the aggregated text.
      EXPECT_EQ(ResponseText(out), want) << out;
      EXPECT_EQ(after.fallbacks, before.fallbacks + 1);
      const std::string log = DecodeLog();
      const size_t at = log.find("remote prefill failed, prefilling locally");
      ASSERT_NE(at, std::string::npos) << log;
      EXPECT_EQ(CountOf(log, "remote prefill failed, prefilling locally"), 1) << log;
      std::cerr << log.substr(at, log.find('\n', at) - at) << "\n";
    } else {
      // Or a clear error.
      auto j = json::parse(out, nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << code << " " << out;
      ASSERT_TRUE(j.contains("error")) << out;
      EXPECT_FALSE(j["error"].value("message", "").empty()) << out;
    }
    EXPECT_TRUE(Eventually([&] { return Decode().blocks_used == 0; }, 10s));
  }
  ASSERT_TRUE(killed_in_flight) << "the prefill worker always finished before it was killed";

  // A restarted prefill worker serves the next long (different) prompt.
  StartPrefill();
  const json next = CompletionBody(LongIds(1, 500, 1300), 16);
  const std::string want = Reference(next);
  const DecodeMetrics before = Decode();
  Expect(next, want);
  const DecodeMetrics after = Decode();
  EXPECT_EQ(after.transfers, before.transfers + 1);
  EXPECT_EQ(after.fallbacks, before.fallbacks);
  EXPECT_TRUE(BlocksFreed(/*prefill_too=*/true)) << "decode "
      << Decode().blocks_used << ", prefill " << PrefillMetric("tandem_kv_blocks_used");
}

TEST_F(DisaggTest, ADecodeWorkerWithoutPrefillWorkersServesLongPromptsLocally) {
  StartWorkers(/*with_prefill=*/false, /*max_local_prefill_tokens=*/64,
               {"--remote-prefill-timeout-s", "30"});
  const json body = CompletionBody(LongGolden()[0]["prompt"], 32);
  const std::string want = Reference(body);
  EXPECT_EQ(want, LongGolden()[0]["greedy_text"].get<std::string>());
  const auto sent = std::chrono::steady_clock::now();
  HttpResult r = Expect(body, want);
  EXPECT_LT(std::chrono::steady_clock::now() - sent, 30s);
  EXPECT_EQ(PromptTokens(r.body), 1500);
  // Streamed, and a chat request over the threshold.
  json streamed = body;
  streamed["stream"] = true;
  HttpResult s = Post(base_ + "/v1/completions", streamed);
  ASSERT_EQ(s.status, 200) << s.body;
  int errors = 0;
  bool done = false;
  // The prompt is cached now (all but its last block): it may prefill locally without asking.
  EXPECT_EQ(StreamText(s.body, /*chat=*/false, &errors, &done), want);
  EXPECT_EQ(errors, 0);
  const json chat = ChatBody(
      json::array({{{"role", "user"},
                    {"content", LongGolden()[1]["prompt"].get<std::string>().substr(0, 1500)}}}),
      16);
  Expect(chat, Reference(chat));
  const DecodeMetrics m = Decode();
  EXPECT_EQ(m.transfers, 0);
  EXPECT_EQ(m.fallbacks, 2);
  EXPECT_EQ(CountOf(DecodeLog(), "remote prefill failed, prefilling locally"), 2) << DecodeLog();
  EXPECT_EQ(m.blocks_used, 0);
  EXPECT_TRUE(BlocksFreed(/*prefill_too=*/false));
}

}  // namespace
}  // namespace tandem::disagg_it
