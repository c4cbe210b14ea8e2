#include <gtest/gtest.h>

#include "loadgen/openai_client.h"
#include "loadgen/sse_parser.h"

namespace tandem::bench {
namespace {

std::vector<SseEvent> ParseInPieces(const std::string& text, size_t piece) {
  SseParser p;
  std::vector<SseEvent> all;
  for (size_t i = 0; i < text.size(); i += piece) {
    auto e = p.Feed(std::string_view(text).substr(i, piece));
    all.insert(all.end(), e.begin(), e.end());
  }
  auto e = p.Finish();
  all.insert(all.end(), e.begin(), e.end());
  return all;
}

TEST(SseParser, SameEventsWhateverTheSplit) {
  const std::string text =
      ": comment\n"
      "data: {\"a\":1}\n\n"
      "event: update\r\ndata:two\r\ndata: lines\r\n\r\n"
      "id: 5\rdata: cr only\r\r"
      "retry: 10\n\n"  // no data: not dispatched
      "data: [DONE]\n\n";
  for (size_t piece = 1; piece <= text.size(); ++piece) {
    auto events = ParseInPieces(text, piece);
    ASSERT_EQ(events.size(), 4u) << "piece " << piece;
    EXPECT_EQ(events[0].data, "{\"a\":1}");
    EXPECT_EQ(events[1].event, "update");
    EXPECT_EQ(events[1].data, "two\nlines");
    EXPECT_EQ(events[2].data, "cr only");
    EXPECT_EQ(events[3].data, "[DONE]");
  }
}

TEST(SseParser, FinishDispatchesAnUnterminatedEvent) {
  SseParser p;
  EXPECT_TRUE(p.Feed("data: x").empty());
  auto e = p.Finish();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].data, "x");
  EXPECT_TRUE(p.Finish().empty());
}

std::string ChatStream() {
  return "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],\"usage\":null}\n\n"
         "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n"
         "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}],\"usage\":null}\n\n"
         "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}],\"usage\":null}\n\n"
         "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,\"total_tokens\":9,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n"
         "data: [DONE]\n\n";
}

TEST(StreamReader, ReasoningDeltasCountForTheClockNotTheReply) {
  const std::string text =
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"Let me think\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"
      "data: [DONE]\n\n";
  RequestRecord r;
  const auto start = Clock::now();
  StreamReader reader(r, start);
  EXPECT_TRUE(reader.OnData(text, start + std::chrono::milliseconds(5)));
  reader.Finish();
  EXPECT_TRUE(r.ok()) << r.error_message;
  EXPECT_EQ(r.num_chunks(), 2);
  EXPECT_EQ(r.output_text, "Hi");
  EXPECT_GT(r.ttft_s, 0);
}

TEST(StreamReader, ChatChunksTimesAndUsage) {
  const std::string text = ChatStream();
  for (size_t piece : {1ul, 7ul, 64ul, text.size()}) {
    RequestRecord r;
    const auto start = Clock::now();
    StreamReader reader(r, start);
    for (size_t i = 0; i < text.size(); i += piece) {
      EXPECT_TRUE(reader.OnData(std::string_view(text).substr(i, piece),
                                start + std::chrono::milliseconds(10 * (i / piece + 1))));
    }
    reader.Finish();
    EXPECT_TRUE(r.ok()) << r.error_message;
    EXPECT_EQ(r.num_chunks(), 2);
    EXPECT_EQ(r.output_text, "Hello");
    EXPECT_EQ(r.prompt_tokens, 7);
    EXPECT_EQ(r.completion_tokens, 2);
    EXPECT_EQ(r.cached_tokens, 4);
    EXPECT_GT(r.ttft_s, 0);
    EXPECT_EQ(r.ttft_s, r.chunk_times_s[0]);
    EXPECT_LE(r.chunk_times_s[0], r.chunk_times_s[1]);
  }
}

TEST(StreamReader, CompletionsText) {
  RequestRecord r;
  StreamReader reader(r, Clock::now());
  reader.OnData("data: {\"choices\":[{\"text\":\" a\"}]}\n\ndata: {\"choices\":[{\"text\":\" b\"}]}\n\ndata: [DONE]\n\n",
                Clock::now());
  reader.Finish();
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.num_chunks(), 2);
  EXPECT_EQ(r.completion_tokens, -1);
}

TEST(StreamReader, BadStreams) {
  struct Case {
    const char* body;
    const char* why;
  } cases[] = {
      {"data: {\"choices\":[{\"text\":\"a\"}]}\n\n", "no [DONE]"},
      {"data: not json\n\ndata: [DONE]\n\n", "not JSON"},
      {"data: {\"error\":{\"message\":\"boom\"}}\n\ndata: [DONE]\n\n", "error event"},
      {"data: [DONE]\n\ndata: {}\n\n", "data after DONE"},
      {"data: {\"choices\":5}\n\ndata: [DONE]\n\n", "choices not an array"},
  };
  for (const Case& c : cases) {
    RequestRecord r;
    StreamReader reader(r, Clock::now());
    reader.OnData(c.body, Clock::now());
    reader.Finish();
    EXPECT_EQ(r.error, ErrorKind::kBadStream) << c.why;
    EXPECT_FALSE(r.error_message.empty());
  }
  RequestRecord r;
  StreamReader reader(r, Clock::now());
  reader.OnData("data: {\"error\":{\"message\":\"boom\"}}\n\n", Clock::now());
  EXPECT_NE(r.error_message.find("boom"), std::string::npos);
  EXPECT_EQ(r.ErrorKey(), "bad_stream");
}

TEST(HttpClient, ParseUrl) {
  auto ep = ParseUrl("http://127.0.0.1:8123");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->host, "127.0.0.1");
  EXPECT_EQ(ep->port, "8123");
  EXPECT_EQ(ep->base_path, "");
  ep = ParseUrl("http://localhost/openai/");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->port, "80");
  EXPECT_EQ(ep->base_path, "/openai");
  ep = ParseUrl("http://[::1]:9000/x");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->host, "::1");
  EXPECT_EQ(ep->port, "9000");
  EXPECT_FALSE(ParseUrl("https://example.com").ok());
  EXPECT_FALSE(ParseUrl("http://:80").ok());
  EXPECT_FALSE(ParseUrl("http://h:99999").ok());
  EXPECT_FALSE(ParseUrl("http://h:x").ok());
}

}  // namespace
}  // namespace tandem::bench
