// The OpenAI side of the client: request bodies for /v1/chat/completions and /v1/completions
// (stream with stream_options.include_usage; max_tokens = the turn's output length; ignore_eos so
// that servers which honour it - vLLM, SGLang, tandem - produce exactly that many tokens), and the
// SSE stream read into a RequestRecord (a time for every non-empty content chunk, usage, errors).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "loadgen/http_client.h"
#include "loadgen/record.h"
#include "loadgen/sse_parser.h"
#include "loadgen/workload.h"

namespace tandem::bench {

struct ClientOptions {
  Endpoint endpoint;
  bool chat = true;            // /v1/chat/completions; false: /v1/completions
  std::string model;
  std::string api_key;         // sent as "Authorization: Bearer KEY" when not empty
  double timeout_s = 600;      // one request, from send to the end of the stream
  bool ignore_eos = true;
};

// The JSON body of turn `turn` of `item`; `replies` holds the server's answers to turns before it
// (chat: system, user, assistant, ... messages; completions: all of it concatenated).
std::string BuildRequestBody(const ClientOptions& options, const WorkItem& item, int turn,
                             const std::vector<std::string>& replies);

// Reads an OpenAI streaming response into `record` (times relative to `request_start`). A chunk
// with delta.content or delta.reasoning_content (a reasoning parser's output) counts for the time to
// first token and the chunk times; only content goes into output_text (the next turn's reply).
class StreamReader {
 public:
  StreamReader(RequestRecord& record, Clock::time_point request_start)
      : record_(record), start_(request_start) {}
  // False once the stream is known bad (the record holds kBadStream).
  bool OnData(std::string_view bytes, Clock::time_point now);
  // At the end of the body: a missing [DONE] is a bad stream.
  void Finish();

 private:
  bool OnEvent(const SseEvent& event, Clock::time_point now);
  bool Bad(std::string message);
  RequestRecord& record_;
  Clock::time_point start_;
  SseParser parser_;
  bool done_ = false;
};

// Sends turn `turn` of `item` on `connection` and records it (start_s relative to `run_start`).
boost::asio::awaitable<RequestRecord> SendTurn(HttpConnection& connection,
                                               const ClientOptions& options, const WorkItem& item,
                                               int turn, const std::vector<std::string>& replies,
                                               Clock::time_point run_start);

// GET /v1/models: the first model's id.
boost::asio::awaitable<Result<std::string>> FetchFirstModel(HttpConnection& connection,
                                                            const ClientOptions& options);

}  // namespace tandem::bench
