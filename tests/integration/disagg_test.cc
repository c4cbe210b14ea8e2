// Disaggregated serving as real processes on 127.0.0.1: tandem frontend -> tandem worker --mode
// decode (+ tandem worker --mode prefill), each test with a private discovery directory
// (TANDEM_DISCOVERY_DIR) and namespace, driven with curl; the decode and prefill workers' own
// /metrics (--metrics-port) and logs are read back:
//   - every prompt prefilled remotely (--max-local-prefill-tokens 0): golden greedy text for every
//     golden prompt, chat and completions, streamed and not; one KV transfer per request, no
//     fallback, the decode worker's "KV Transfer metrics:" log line;
//   - conditional disaggregation (threshold 64): a short prompt makes no transfer, a long one
//     exactly one, with the text of an aggregated server (`tandem run --mode agg`, the reference,
//     shared by the whole suite);
//   - multi-turn (threshold 16): only the blocks the decode worker lacks cross the wire (bytes per
//     block from turn 1, cached blocks from the decode worker's prefix cache hits, and exactly
//     for a token-id prompt that extends turn 1's); a repeated prompt transfers nothing;
//   (failing and missing prefill workers: disagg_failover_test.cc; the fixture: disagg_fixture.h).
#include "disagg_fixture.h"

namespace tandem::disagg_it {
namespace {

TEST_F(DisaggTest, EveryPromptPrefilledRemotelyGivesGoldenTextWithOneTransferPerRequest) {
  StartWorkers(/*with_prefill=*/true, /*max_local_prefill_tokens=*/0);
  auto golden = ReadJsonFile(GoldenDir() + "/tiny-qwen3.json");
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();
  const DecodeMetrics start = Decode();
  ASSERT_EQ(start.transfers, 0);
  ASSERT_EQ(start.fallbacks, 0);
  int checked = 0;
  for (const auto& c : (*golden)["generation"]) {
    const bool chat = c["chat"].get<bool>();
    json body;
    if (chat) {
      const auto& m = c["messages"];
      body = ChatBody(m.is_string() ? json::array({{{"role", "user"}, {"content", m}}}) : m,
                      static_cast<int>(c["greedy_ids"].size()));
    } else {
      body = CompletionBody(c["prompt"], static_cast<int>(c["greedy_ids"].size()));
    }
    const std::string want = c["greedy_text"].get<std::string>();
    SCOPED_TRACE(body.dump());
    for (bool stream : {false, true}) {
      body["stream"] = stream;
      const double before = Decode().transfers;
      HttpResult r = Post(base_ + PathOf(body), body);
      ASSERT_EQ(r.status, 200) << r.body;
      if (stream) {
        int errors = 0;
        bool done = false;
        EXPECT_EQ(StreamText(r.body, chat, &errors, &done), want);
        EXPECT_EQ(errors, 0);
        EXPECT_TRUE(done);
      } else {
        EXPECT_EQ(ResponseText(r.body), want);
        EXPECT_EQ(PromptTokens(r.body), static_cast<int>(c["prompt_ids"].size()));
      }
      // The transfer is counted before the first token goes out.
      EXPECT_EQ(Decode().transfers, before + 1) << "stream=" << stream;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 8);
  const DecodeMetrics end = Decode();
  EXPECT_EQ(end.transfers, 16);
  EXPECT_EQ(end.fallbacks, 0);
  EXPECT_EQ(end.errors, 0);
  EXPECT_GT(end.bytes, 0);
  EXPECT_EQ(CountOf(DecodeLog(), "] remote prefill: "), 16);
  EXPECT_EQ(CountOf(DecodeLog(), "remote prefill failed"), 0);
  // The KV transfer backend in use, logged once at start-up by each worker (issue 7).
  EXPECT_EQ(CountOf(DecodeLog(), "KV transfer backend: tcp (host memory)"), 1) << DecodeLog();
  EXPECT_EQ(CountOf(ReadText(dir_ / "prefill-1.log"), "KV transfer backend: tcp (host memory)"), 1);
  static const std::regex line(
      "KV Transfer metrics: Num successful transfers=16, Avg xfer time \\(ms\\)=[0-9.]+, "
      "Avg MB per transfer=[0-9.]+, Throughput \\(MB/s\\)=[0-9.]+");
  EXPECT_TRUE(Eventually([&] { return std::regex_search(DecodeLog(), line); }, 10s)) << DecodeLog();
  EXPECT_TRUE(Eventually([&] {
    return DecodeLog().find("External prefix cache hit rate: ") != std::string::npos;
  }, 10s));
  EXPECT_TRUE(BlocksFreed(/*prefill_too=*/true));
}

TEST_F(DisaggTest, OnlyPromptsOverTheThresholdArePrefilledRemotely) {
  StartWorkers(/*with_prefill=*/true, /*max_local_prefill_tokens=*/64);
  // Short: prefilled on the decode worker, nothing crosses.
  const json short_body = CompletionBody("The man looked at the", 16);
  const std::string short_want = Reference(short_body);
  HttpResult s = Expect(short_body, short_want);
  EXPECT_LT(PromptTokens(s.body), 64);
  DecodeMetrics m = Decode();
  EXPECT_EQ(m.transfers, 0);
  EXPECT_EQ(m.bytes, 0);
  EXPECT_EQ(PrefillMetric("tandem_prefix_cache_queries_total"), 0);  // never asked

  // Long (400 tokens): exactly one transfer of all its blocks, the aggregated text.
  const json long_body = CompletionBody(LongIds(0, 0, 400), 24);
  const std::string long_want = Reference(long_body);
  ASSERT_FALSE(long_want.empty());
  HttpResult l = Expect(long_body, long_want);
  EXPECT_EQ(PromptTokens(l.body), 400);
  m = Decode();
  EXPECT_EQ(m.transfers, 1);
  EXPECT_EQ(m.fallbacks, 0);
  EXPECT_GT(m.bytes, 0);
  EXPECT_EQ(std::fmod(m.bytes, CeilBlocks(400)), 0) << m.bytes;
  EXPECT_EQ(m.external_hits, 400);
  EXPECT_NE(DecodeLog().find("remote prefill: " + std::to_string(CeilBlocks(400)) + " blocks (" +
                             std::to_string(static_cast<uint64_t>(m.bytes)) + " bytes)"),
            std::string::npos) << DecodeLog();
  // The same through a chat request over the threshold, streamed.
  json chat = ChatBody(json::array({{{"role", "user"},
                                     {"content", LongGolden()[1]["prompt"].get<std::string>()
                                                     .substr(0, 1200)}}}),
                       16);
  const std::string chat_want = Reference(chat);
  chat["stream"] = true;
  HttpResult c = Post(base_ + PathOf(chat), chat);
  ASSERT_EQ(c.status, 200) << c.body;
  int errors = 0;
  bool done = false;
  EXPECT_EQ(StreamText(c.body, /*chat=*/true, &errors, &done), chat_want);
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(Decode().transfers, 2);
  EXPECT_TRUE(BlocksFreed(/*prefill_too=*/true));
}

TEST_F(DisaggTest, MultiTurnTransfersOnlyTheBlocksTheDecodeWorkerLacks) {
  // Threshold 16: the new part of each turn alone exceeds it; a repeated prompt (at most one
  // block uncached) stays local.
  StartWorkers(/*with_prefill=*/true, /*max_local_prefill_tokens=*/16);
  const std::string text0 = LongGolden()[0]["prompt"].get<std::string>();
  const std::string text1 = LongGolden()[1]["prompt"].get<std::string>();

  // Chat: turn 1, long unique content: all of its blocks cross.
  json messages = json::array({{{"role", "user"}, {"content", text0.substr(0, 1300)}}});
  DecodeMetrics m0 = Decode();
  HttpResult t1 = Post(base_ + "/v1/chat/completions", ChatBody(messages, 24));
  ASSERT_EQ(t1.status, 200) << t1.body;
  DecodeMetrics m1 = Decode();
  const int p1 = PromptTokens(t1.body);
  ASSERT_GT(p1, 200);
  EXPECT_EQ(m1.transfers - m0.transfers, 1);
  EXPECT_EQ(m1.cache_hits - m0.cache_hits, 0);
  const double bytes1 = m1.bytes - m0.bytes;
  ASSERT_GT(bytes1, 0);
  ASSERT_EQ(std::fmod(bytes1, CeilBlocks(p1)), 0) << bytes1 << " bytes for " << p1 << " tokens";
  const double block_bytes = bytes1 / CeilBlocks(p1);  // one block, all layers

  // Turn 2: the history and a new user message (~150 tokens): only what decode lacks crosses.
  messages.push_back({{"role", "assistant"}, {"content", ResponseText(t1.body)}});
  messages.push_back({{"role", "user"}, {"content", text1.substr(0, 600)}});
  const json turn2 = ChatBody(messages, 16);
  HttpResult t2 = Expect(turn2, Reference(turn2));
  DecodeMetrics m2 = Decode();
  const int p2 = PromptTokens(t2.body);
  ASSERT_GT(p2, p1 + 100);
  EXPECT_EQ(m2.transfers - m1.transfers, 1);
  const double cached2 = m2.cache_hits - m1.cache_hits;  // tokens decode had of turn 2's prompt
  EXPECT_EQ(std::fmod(cached2, kBlockSize), 0);
  // Turn 1's prompt is a prefix of turn 2's up to the generation prompt's "<think></think>".
  EXPECT_GE(cached2, (p1 - 8) / kBlockSize * kBlockSize) << "p1=" << p1;
  EXPECT_LT(cached2, p2);
  const double bytes2 = m2.bytes - m1.bytes;
  EXPECT_EQ(bytes2, (CeilBlocks(p2) - cached2 / kBlockSize) * block_bytes)
      << "p2=" << p2 << " cached=" << cached2;
  EXPECT_LT(bytes2, CeilBlocks(p2) * block_bytes);
  EXPECT_EQ(m2.external_hits - m1.external_hits, p2 - cached2);

  // The same turn 2 again: everything but the last block is cached: nothing crosses.
  Expect(turn2, Reference(turn2));
  DecodeMetrics m3 = Decode();
  EXPECT_EQ(m3.transfers, m2.transfers);
  EXPECT_EQ(m3.bytes, m2.bytes);

  // Completions with token ids, where the cached part is known exactly: turn 1 = 300 ids (18 full
  // blocks cross with the partial 19th), turn 2 = the same 300 + 150 new ids: decode has
  // floor(300 / 16) = 18 blocks, so 29 - 18 = 11 blocks cross.
  const json c1 = CompletionBody(LongIds(1, 1000, 1300), 8);
  Expect(c1, Reference(c1));
  DecodeMetrics m4 = Decode();
  EXPECT_EQ(m4.transfers - m3.transfers, 1);
  EXPECT_EQ(m4.bytes - m3.bytes, CeilBlocks(300) * block_bytes);
  json ids2 = LongIds(1, 1000, 1300);
  for (const auto& id : LongIds(1, 2000, 2150)) ids2.push_back(id);
  const json c2 = CompletionBody(ids2, 8);
  Expect(c2, Reference(c2));
  DecodeMetrics m5 = Decode();
  EXPECT_EQ(m5.transfers - m4.transfers, 1);
  EXPECT_EQ(m5.cache_hits - m4.cache_hits, 300 / kBlockSize * kBlockSize);
  EXPECT_EQ(m5.bytes - m4.bytes, (CeilBlocks(450) - 300 / kBlockSize) * block_bytes);
  EXPECT_NE(DecodeLog().find("remote prefill: " + std::to_string(CeilBlocks(450) - 300 / kBlockSize) +
                             " blocks"),
            std::string::npos);
  // And again: nothing crosses.
  Expect(c2, Reference(c2));
  DecodeMetrics m6 = Decode();
  EXPECT_EQ(m6.transfers, m5.transfers);
  EXPECT_EQ(m6.bytes, m5.bytes);
  EXPECT_EQ(m6.fallbacks, 0);
  EXPECT_TRUE(BlocksFreed(/*prefill_too=*/true));
}

}  // namespace
}  // namespace tandem::disagg_it
