#include <cmath>
#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "loadgen/openai_client.h"
#include "loadgen/runner.h"
#include "loadgen/workload.h"

namespace tandem::bench {
namespace {

std::shared_ptr<const Tokenizer> Tok() {
  static auto tok = *Tokenizer::Load(DefaultModelDir());
  return tok;
}
std::shared_ptr<const PromptVocab> Vocab() {
  static auto vocab = *PromptVocab::FromTokenizer(*Tok());
  return vocab;
}

TEST(LengthDist, Parse) {
  auto d = ParseLengthDist("128");
  ASSERT_TRUE(d.ok());
  std::mt19937_64 rng(1);
  EXPECT_EQ(d->Sample(rng), 128);
  d = ParseLengthDist("uniform:10:20");
  ASSERT_TRUE(d.ok());
  for (int i = 0; i < 1000; ++i) {
    int v = d->Sample(rng);
    EXPECT_GE(v, 10);
    EXPECT_LE(v, 20);
  }
  d = ParseLengthDist("normal:100:10");
  ASSERT_TRUE(d.ok());
  double sum = 0;
  for (int i = 0; i < 4000; ++i) sum += d->Sample(rng);
  EXPECT_NEAR(sum / 4000, 100, 1.5);
  for (const char* bad : {"", "0", "-3", "1.5", "uniform:5", "uniform:9:3", "normal:0:1", "zipf:1:2", "x"})
    EXPECT_FALSE(ParseLengthDist(bad).ok()) << bad;
}

TEST(PromptVocab, WordsEncodeToExactlyNTokens) {
  const auto& vocab = *Vocab();
  EXPECT_GT(vocab.size(), 1000u);
  std::mt19937_64 rng(5);
  for (int n : {1, 2, 17, 32, 100, 513}) {
    const std::string text = vocab.Words(n, rng);
    EXPECT_EQ(Tok()->Encode(text).size(), static_cast<size_t>(n)) << n;
  }
  EXPECT_EQ(vocab.Words(10, 42).substr(0, vocab.Words(4, 42).size()), vocab.Words(4, 42));
}

TEST(Synthetic, LengthsPrefixesAndDeterminism) {
  WorkloadOptions o;
  o.input_len = *ParseLengthDist("32");
  o.output_len = *ParseLengthDist("uniform:4:8");
  o.num_prefixes = 2;
  o.prefix_len = 20;
  o.num_turns = 3;
  o.seed = 9;
  auto w1 = MakeWorkload(o, Tok(), Vocab());
  auto w2 = MakeWorkload(o, Tok(), Vocab());
  ASSERT_TRUE(w1.ok());
  std::vector<WorkItem> items;
  for (int i = 0; i < 4; ++i) {
    items.push_back(*(*w1)->Next());
    const WorkItem other = *(*w2)->Next();
    EXPECT_EQ(items.back().turns[0].text, other.turns[0].text);
  }
  EXPECT_EQ(items[0].system, items[2].system);
  EXPECT_NE(items[0].system, items[1].system);
  EXPECT_EQ(Tok()->Encode(items[0].system).size(), 20u);
  for (const WorkItem& item : items) {
    ASSERT_EQ(item.turns.size(), 3u);
    for (const Turn& t : item.turns) {
      EXPECT_EQ(Tok()->Encode(t.text).size(), 32u);
      EXPECT_GE(t.output_tokens, 4);
      EXPECT_LE(t.output_tokens, 8);
    }
    EXPECT_EQ(Tok()->Encode(item.system + item.turns[0].text).size(), 52u);
  }
}

TEST(Mooncake, EqualHashIdsGiveEqualPrefixes) {
  const std::string trace =
      "{\"timestamp\": 0, \"input_length\": 40, \"output_length\": 5, \"hash_ids\": [1, 2, 3]}\n"
      "{\"timestamp\": 250, \"input_length\": 36, \"output_length\": 5, \"hash_ids\": [1, 2, 7]}\n"
      "\n"
      "{\"timestamp\": 500, \"input_length\": 50, \"output_length\": 0, \"hash_ids\": [9]}\n";
  auto entries = ParseMooncake(trace);
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[1].timestamp_ms, 250);
  const int block = 16;
  std::vector<std::vector<int32_t>> ids;
  for (size_t i = 0; i < entries->size(); ++i)
    ids.push_back(Tok()->Encode(MooncakePrompt((*entries)[i], block, *Vocab(), 0, i)));
  EXPECT_EQ(ids[0].size(), 40u);
  EXPECT_EQ(ids[1].size(), 36u);
  EXPECT_EQ(ids[2].size(), 50u);  // one block of 16, then filler
  // The first two blocks (hash ids 1, 2) are equal, the third differs.
  EXPECT_TRUE(std::equal(ids[0].begin(), ids[0].begin() + 2 * block, ids[1].begin()));
  EXPECT_FALSE(std::equal(ids[0].begin() + 2 * block, ids[0].begin() + 36, ids[1].begin() + 2 * block));
  EXPECT_NE(ids[2][0], ids[0][0]);

  WorkloadOptions o;
  o.kind = "mooncake";
  o.block_size = block;
  const std::string path = ::testing::TempDir() + "/trace.jsonl";
  { std::ofstream(path) << trace; }
  o.path = path;
  auto w = MakeWorkload(o, Tok(), Vocab());
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE((*w)->has_timestamps());
  auto a = (*w)->Next(), b = (*w)->Next(), c = (*w)->Next();
  EXPECT_DOUBLE_EQ(b->timestamp_s, 0.25);
  EXPECT_EQ(c->turns[0].output_tokens, 1);  // at least one token
  EXPECT_FALSE((*w)->Next().has_value());

  EXPECT_FALSE(ParseMooncake("{\"timestamp\": 0}\n").ok());
  EXPECT_FALSE(ParseMooncake("not json\n").ok());
  EXPECT_FALSE(ParseMooncake("{\"timestamp\":0,\"input_length\":4,\"output_length\":1,\"hash_ids\":[\"x\"]}").ok());
}

TEST(ShareGpt, ParsesHumanGptPairs) {
  const std::string data = R"([
    {"id": "a", "conversations": [
      {"from": "human", "value": "What is the capital of France?"},
      {"from": "gpt", "value": "The capital of France is Paris."},
      {"from": "human", "value": "And of Italy?"},
      {"from": "gpt", "value": "Rome."}]},
    {"id": "b", "conversations": [{"from": "gpt", "value": "no human first"}]},
    {"id": "c", "conversations": [{"from": "human", "value": "alone"}]},
    {"id": "d"},
    {"id": "e", "conversations": [
      {"from": "system", "value": "sys"},
      {"from": "human", "value": "Hi there"},
      {"from": "gpt", "value": "Hello! How can I help?"}]}
  ])";
  WorkloadOptions o;
  auto items = LoadShareGpt(data, *Tok(), o);
  ASSERT_TRUE(items.ok());
  ASSERT_EQ(items->size(), 2u);
  EXPECT_EQ((*items)[0].turns.size(), 1u);
  EXPECT_EQ((*items)[0].turns[0].text, "What is the capital of France?");
  EXPECT_EQ((*items)[0].turns[0].input_tokens,
            static_cast<int>(Tok()->Encode("What is the capital of France?").size()));
  EXPECT_EQ((*items)[0].turns[0].output_tokens,
            static_cast<int>(Tok()->Encode("The capital of France is Paris.").size()));
  EXPECT_EQ((*items)[1].turns[0].text, "Hi there");
  o.num_turns = 4;
  items = LoadShareGpt(data, *Tok(), o);
  ASSERT_TRUE(items.ok());
  EXPECT_EQ((*items)[0].turns.size(), 2u);
  EXPECT_EQ((*items)[0].turns[1].text, "And of Italy?");
  o.output_len_given = true;
  o.output_len = *ParseLengthDist("7");
  items = LoadShareGpt(data, *Tok(), o);
  EXPECT_EQ((*items)[0].turns[1].output_tokens, 7);
  EXPECT_FALSE(LoadShareGpt("{}", *Tok(), o).ok());
}

TEST(RequestBody, MultiTurnChatAndCompletions) {
  WorkItem item;
  item.system = " sys";
  item.turns = {{" one", 1, 3}, {" two", 1, 4}};
  ClientOptions o;
  o.model = "m";
  auto body = nlohmann::json::parse(BuildRequestBody(o, item, 1, {" reply"}));
  EXPECT_EQ(body["max_tokens"], 4);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  ASSERT_EQ(body["messages"].size(), 4u);
  EXPECT_EQ(body["messages"][0]["role"], "system");
  EXPECT_EQ(body["messages"][2]["role"], "assistant");
  EXPECT_EQ(body["messages"][2]["content"], " reply");
  EXPECT_EQ(body["messages"][3]["content"], " two");
  o.chat = false;
  o.ignore_eos = false;
  body = nlohmann::json::parse(BuildRequestBody(o, item, 1, {" reply"}));
  EXPECT_EQ(body["prompt"], " sys one reply two");
  EXPECT_FALSE(body.contains("ignore_eos"));
}

TEST(Poisson, MeanRateAndExponentialGaps) {
  for (double rate : {0.5, 4.0, 50.0}) {
    const int n = 20000;
    auto t = PoissonArrivals(rate, n, 17);
    ASSERT_EQ(t.size(), static_cast<size_t>(n));
    EXPECT_NEAR(n / t.back(), rate, rate * 0.03);
    double sum = 0, sq = 0;
    for (int i = 0; i < n; ++i) {
      const double gap = t[i] - (i ? t[i - 1] : 0);
      EXPECT_GE(gap, 0);
      sum += gap;
      sq += gap * gap;
    }
    const double mean = sum / n, var = sq / n - mean * mean;
    EXPECT_NEAR(std::sqrt(var) / mean, 1.0, 0.05);  // exponential: coefficient of variation 1
  }
  EXPECT_EQ(PoissonArrivals(2, 5, 1), PoissonArrivals(2, 5, 1));
  EXPECT_NE(PoissonArrivals(2, 5, 1), PoissonArrivals(2, 5, 2));
}

}  // namespace
}  // namespace tandem::bench
