// The generation handler: validate -> tokenize -> submit n engine requests -> collect outputs from
// a channel fed by the engine's callbacks -> one JSON response or an SSE stream.
#include "frontend/openai_handlers.h"

// GCC 12 misreads asio's awaitable frame allocator (aligned_new / sized delete) as a mismatch.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <algorithm>
#include <chrono>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "common/logging.h"
#include "frontend/chat_output.h"
#include "frontend/errors.h"
#include "frontend/openai_response.h"

namespace tandem::openai {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using Headers = std::map<std::string, std::string>;

namespace {

constexpr char kJson[] = "application/json";

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// What the handler shares with the engine's callbacks (engine thread) and the disconnect callback
// (connection executor). Outputs travel through a channel; Close() destroys it on the handler's
// side, after which late outputs are dropped.
class Flight {
 public:
  using Channel =
      asio::experimental::concurrent_channel<void(boost::system::error_code, RequestOutput)>;

  Flight(asio::any_io_executor executor, size_t capacity, std::weak_ptr<EngineClient> engine,
         std::vector<std::string> ids)
      : engine_(std::move(engine)), ids_(std::move(ids)),
        channel_(std::make_unique<Channel>(std::move(executor), capacity)) {}

  // Engine thread.
  void Deliver(RequestOutput output) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!channel_) return;
    std::string request_id = output.request_id;
    if (!channel_->try_send(boost::system::error_code(), std::move(output)))
      log::error("[{}] output dropped: the channel is full", request_id);
  }

  // Handler only (the channel exists until Close).
  asio::awaitable<std::optional<RequestOutput>> Receive() {
    auto [ec, output] = co_await channel_->async_receive(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return std::nullopt;
    co_return std::move(output);
  }

  void Close() {
    std::unique_ptr<Channel> doomed;
    std::lock_guard<std::mutex> lock(mu_);
    doomed = std::move(channel_);
  }

  // Any thread: ends every engine request of this flight (unknown / finished ids are ignored).
  void CancelAll() {
    if (auto engine = engine_.lock())
      for (const std::string& id : ids_) engine->Cancel(id);
  }

  const std::vector<std::string>& ids() const { return ids_; }

 private:
  std::weak_ptr<EngineClient> engine_;  // weak: callbacks held by the engine must not own it
  const std::vector<std::string> ids_;
  std::mutex mu_;
  std::unique_ptr<Channel> channel_;
};

struct Choice {
  bool finished = false;
  bool got_token = false;
  Clock::time_point last_token;
  ChoiceResult result;
  size_t logprob_offset = 0;  // completions text_offset of the next token
  int num_cached_tokens = 0;  // prompt tokens its engine found in the prefix cache
  std::unique_ptr<ChatOutput> output;  // chat with a reasoning or tool-call parser
  std::vector<ojson> deltas;           // what `output` released for the last output applied
};

ApiError SubmitError(const Status& st) {
  ApiError e;
  e.message = st.message();
  switch (st.code()) {
    case StatusCode::kResourceExhausted:
      e.status = 503;
      e.type = "server_error";
      e.code = "engine_overloaded";
      break;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kUnimplemented:
      e.status = 400;
      break;
    case StatusCode::kNotFound:
      e.status = 404;
      break;
    case StatusCode::kFailedPrecondition:
      e.status = 503;
      e.type = "server_error";
      break;
    default:
      e.status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

// The client sees a generic 500 naming the request id; the engine's text (which for a remote
// worker names its address) goes to the log only.
ApiError EngineFailure(const std::string& id, const RequestOutput& out) {
  if (out.finish_reason == FinishReason::kError && !out.refusal.ok()) {
    return SubmitError(out.refusal);  // the engine's own words (RemoteEngineClient logged `error`)
  }
  ApiError e;
  e.status = 500;
  e.type = "server_error";
  if (out.finish_reason == FinishReason::kError) {
    log::warn("[{}] {} failed: {}", id, out.request_id,
              out.error.empty() ? std::string("(no message)") : out.error);
    e.message = out.worker_lost
                    ? fmt::format("The worker serving your request went away ({}).", id)
                    : fmt::format("The server had an error while processing your request ({}).", id);
  } else {
    e.message = "The request was aborted by the engine.";
  }
  return e;
}

bool Failed(const RequestOutput& out) {
  return out.finished &&
         (out.finish_reason == FinishReason::kError || out.finish_reason == FinishReason::kAbort);
}

// One HTTP generation request in flight.
class Generation {
 public:
  Generation(OpenAIService::State& s, ParsedRequest& req, std::string id, Clock::time_point start,
             int num_prompt_tokens, const std::string& echo_text)
      : s_(s), req_(req), chat_(req.endpoint == Endpoint::kChatCompletions), start_(start),
        num_prompt_tokens_(num_prompt_tokens), echo_text_(echo_text),
        choices_(static_cast<size_t>(req.n)) {
    header_.id = std::move(id);
    header_.created = UnixSeconds();
    header_.model = s.options.served_model_name;
    ChatOutputOptions output_options;
    output_options.reasoning = s.options.reasoning_parser.value_or(chat_parse::ReasoningFormat::kNone);
    // A response_format / guided_* output is the grammar's text, returned as it is.
    if (req.params.structured.kind != grammar::StructuredKind::kNone && !req.tools.constrained)
      output_options.reasoning = chat_parse::ReasoningFormat::kNone;
    output_options.tool_calls = req.tools.format;
    output_options.parallel_tool_calls = req.tools.parallel;
    output_options.tools = &req.chat_options.tools;
    for (int i = 0; i < req.n; ++i) {
      index_of_[fmt::format("{}-{}", header_.id, i)] = i;
      choices_[i].result.text = echo_text;
      choices_[i].logprob_offset = echo_text.size();
      if (chat_) {
        auto output = std::make_unique<ChatOutput>(output_options);
        if (!output->passthrough()) choices_[i].output = std::move(output);
      }
    }
    num_unfinished_ = req.n;
    s_.metrics.generation_requests.Inc();
    s_.metrics.prompt_tokens_before_first_token.Inc(num_prompt_tokens_);
  }
  ~Generation() {
    if (!first_token_seen_) s_.metrics.prompt_tokens_before_first_token.Dec(num_prompt_tokens_);
  }
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  bool want_logprobs() const { return req_.params.logprobs >= 0; }
  int num_unfinished() const { return num_unfinished_; }
  const ResponseHeader& header() const { return header_; }
  bool finished(int i) const { return choices_[i].finished; }
  void MarkNotSubmitted(int from) {
    for (int i = from; i < req_.n; ++i)
      if (!choices_[i].finished) choices_[i].finished = true, --num_unfinished_;
  }

  // Accounts one output (metrics, per-choice text). Returns the choice index, -1 if unknown.
  int Apply(const RequestOutput& out) {
    auto it = index_of_.find(out.request_id);
    if (it == index_of_.end()) return -1;
    Choice& c = choices_[it->second];
    if (c.finished) return -1;
    const auto now = Clock::now();
    const size_t k = out.new_token_ids.size();
    if (k > 0) {
      if (!first_token_seen_) {
        s_.metrics.time_to_first_token.Observe(Seconds(now - start_));
        s_.metrics.prompt_tokens_before_first_token.Dec(num_prompt_tokens_);
      }
      first_token_seen_ = true;
      if (c.got_token) {
        double gap = Seconds(now - c.last_token) / static_cast<double>(k);
        for (size_t j = 0; j < k; ++j) s_.metrics.inter_token_latency.Observe(gap);
      }
      c.got_token = true;
      c.last_token = now;
    }
    c.result.text += out.new_text;
    if (c.output) {
      c.deltas = c.output->Feed(out.new_text, static_cast<int>(k));
      if (out.finished) {
        for (ojson& d : c.output->Finish()) c.deltas.push_back(std::move(d));
        c.result.message = c.output->Message();
        c.result.tool_calls = c.output->has_tool_calls();
      }
    }
    if (want_logprobs())
      c.result.logprobs.insert(c.result.logprobs.end(), out.new_logprobs.begin(),
                               out.new_logprobs.end());
    c.result.num_output_tokens = std::max(c.result.num_output_tokens, out.num_output_tokens);
    if (out.finished) {
      c.finished = true;
      --num_unfinished_;
      c.result.finish_reason = out.finish_reason;
      c.num_cached_tokens = out.num_cached_tokens;
      s_.metrics.prompt_tokens.Inc(out.num_prompt_tokens);
      s_.metrics.prefix_cache_queries.Inc(out.num_prompt_tokens);
      s_.metrics.prefix_cache_hits.Inc(out.num_cached_tokens);
      s_.metrics.generation_tokens.Inc(c.result.num_output_tokens);
      log::debug("[{}] {} finished: {}, {} tokens ({} prompt tokens cached)", header_.id,
                 out.request_id, FinishReasonName(out.finish_reason), c.result.num_output_tokens,
                 out.num_cached_tokens);
    }
    return it->second;
  }

  ojson Usage() const {
    int completion = 0, cached = 0, reasoning = -1;
    for (const Choice& c : choices_) {
      completion += c.result.num_output_tokens;
      cached = std::max(cached, c.num_cached_tokens);
      if (c.output && c.output->reasoning_on()) reasoning = std::max(reasoning, 0) + c.output->reasoning_tokens();
    }
    return UsageJson(num_prompt_tokens_, completion, cached, reasoning);
  }

  std::string Body() const {
    std::vector<ChoiceResult> results;
    for (const Choice& c : choices_) results.push_back(c.result);
    ojson j = chat_ ? ChatCompletionJson(header_, results, want_logprobs(), *s_.tokenizer, Usage())
                    : CompletionJson(header_, results, want_logprobs(), echo_text_.size(),
                                     *s_.tokenizer, Usage());
    return Dump(j);
  }

  // SSE chunks opening the stream: the assistant role (chat) or the echoed prompt (completions).
  std::string OpeningChunks() const {
    std::string data;
    for (int i = 0; i < req_.n; ++i) {
      if (chat_)
        data += SseData(ChatChunkJson(header_, i, ojson{{"role", "assistant"}, {"content", ""}},
                                      nullptr, nullptr, req_.include_usage));
      else if (!echo_text_.empty())
        data += SseData(CompletionChunkJson(header_, i, echo_text_, nullptr, nullptr,
                                            req_.include_usage));
    }
    return data;
  }

  // SSE chunks for one output of choice i (already applied).
  std::string Chunks(int i, const RequestOutput& out) {
    Choice& c = choices_[i];
    const bool lp = want_logprobs() && !out.new_logprobs.empty();
    const bool done = out.finished && !Failed(out);
    std::string data;
    if (chat_) {
      ojson logprobs = nullptr;
      if (lp) logprobs = ojson{{"content", ChatLogprobEntries(out.new_logprobs, *s_.tokenizer)}};
      if (c.output) {
        // The parsers' deltas; the output's logprobs ride on the first (or an empty delta).
        if (c.deltas.empty() && lp) c.deltas.push_back(ojson::object());
        for (ojson& d : c.deltas) {
          data += SseData(ChatChunkJson(header_, i, std::move(d), std::move(logprobs), nullptr,
                                        req_.include_usage));
          logprobs = nullptr;
        }
        c.deltas.clear();
      } else if (!out.new_text.empty() || lp) {
        data += SseData(ChatChunkJson(header_, i, ojson{{"content", out.new_text}},
                                      std::move(logprobs), nullptr, req_.include_usage));
      }
      if (done)
        data += SseData(ChatChunkJson(header_, i, ojson::object(), nullptr,
                                      ChatFinishReason(out.finish_reason, c.result.tool_calls),
                                      req_.include_usage));
    } else if (!out.new_text.empty() || lp || done) {
      ojson logprobs = nullptr;
      if (want_logprobs()) {
        CompletionLogprobs l(c.logprob_offset);
        l.Append(out.new_logprobs, *s_.tokenizer);
        c.logprob_offset = l.offset();
        logprobs = l.ToJson();
      }
      ojson finish = done ? ojson(FinishReasonString(out.finish_reason)) : ojson(nullptr);
      data += SseData(CompletionChunkJson(header_, i, out.new_text, std::move(logprobs),
                                          std::move(finish), req_.include_usage));
    }
    return data;
  }

  std::string FinishReasons() const {
    std::string r;
    for (const Choice& c : choices_) {
      if (!r.empty()) r += ',';
      r += FinishReasonName(c.result.finish_reason);
    }
    return r;
  }

 private:
  OpenAIService::State& s_;
  ParsedRequest& req_;
  const bool chat_;
  const Clock::time_point start_;
  const int num_prompt_tokens_;
  const std::string& echo_text_;
  ResponseHeader header_;
  std::vector<Choice> choices_;
  std::unordered_map<std::string, int> index_of_;
  int num_unfinished_ = 0;
  bool first_token_seen_ = false;
};

// Runs `f` when the coroutine frame goes away, however the handler ends.
template <typename F>
struct Finally {
  F f;
  ~Finally() { f(); }
};
template <typename F>
Finally(F) -> Finally<F>;

}  // namespace

std::optional<ApiError> CheckAuth(const OpenAIService::State& state, const http::Request& request) {
  const std::string& key = state.options.api_key;
  if (key.empty()) return std::nullopt;
  std::string auth = request.Header("authorization");
  std::string given;
  if (auth.size() > 7 && (auth.compare(0, 7, "Bearer ") == 0 || auth.compare(0, 7, "bearer ") == 0))
    given = auth.substr(7);
  // Constant time in the key's length.
  bool match = given.size() == key.size();
  unsigned char diff = 0;
  for (size_t i = 0; i < key.size(); ++i)
    diff |= static_cast<unsigned char>(key[i] ^ (i < given.size() ? given[i] : 0));
  if (match && diff == 0) return std::nullopt;
  ApiError e;
  e.status = 401;
  e.code = "invalid_api_key";
  e.message = auth.empty() ? "You didn't provide an API key. Provide it in the Authorization "
                             "header as 'Authorization: Bearer YOUR_KEY'."
                           : "Incorrect API key provided.";
  return e;
}

asio::awaitable<bool> WriteError(http::ResponseWriter& writer, const ApiError& error,
                                 Headers headers) {
  co_return co_await writer.WriteFull(error.status, kJson, error.Body(), std::move(headers));
}

asio::awaitable<void> HandleGenerate(std::shared_ptr<OpenAIService::State> s, Endpoint endpoint,
                                     const http::Request& request, http::ResponseWriter& w) {
  const auto start = Clock::now();
  const bool chat = endpoint == Endpoint::kChatCompletions;
  const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
  const std::string id = NewResponseId(chat ? "chatcmpl-" : "cmpl-");
  Headers headers{{"x-request-id", id}};
  int status = 200;
  bool submitted = false;
  Finally record{[&] {
    s->metrics.CountRequest(path, status);
    if (submitted) s->metrics.request_duration.Observe(Seconds(Clock::now() - start));
  }};

  auto reject = [&](const ApiError& e) -> asio::awaitable<void> {
    status = e.status;
    log::info("[{}] {} {}: {}", id, path, e.status, http::ClientText(e.message, 1024));
    co_await WriteError(w, e, headers);
  };

  if (auto e = CheckAuth(*s, request)) co_return co_await reject(*e);
  ParsedRequest req;
  ParseOptions parse_options{s->options.served_model_name, s->options.max_n,
                             s->options.tool_call_parser.value_or(chat_parse::ToolCallFormat::kNone),
                             s->options.reasoning_parser.value_or(chat_parse::ReasoningFormat::kNone) !=
                                 chat_parse::ReasoningFormat::kNone,
                             s->options.sampling_defaults};
  if (auto e = ParseRequest(endpoint, request.body, parse_options, &req))
    co_return co_await reject(*e);
  std::vector<int32_t> prompt_ids;
  std::string echo_text;
  const int max_model_len = s->engine->model_info().max_model_len;
  if (auto e = TokenizePrompt(&req, *s->tokenizer, s->renderer.get(), max_model_len, &prompt_ids,
                              &echo_text, s->max_token_bytes))
    co_return co_await reject(*e);

  std::vector<std::string> ids;
  for (int i = 0; i < req.n; ++i) ids.push_back(fmt::format("{}-{}", id, i));
  const size_t capacity = static_cast<size_t>(req.n) * (static_cast<size_t>(req.params.max_tokens) + 2);
  auto flight = std::make_shared<Flight>(w.executor(), capacity, s->engine, ids);
  Generation gen(*s, req, id, start, static_cast<int>(prompt_ids.size()), echo_text);
  Finally cleanup{[&] {
    for (int i = 0; i < req.n; ++i)
      if (!gen.finished(i)) s->engine->Cancel(flight->ids()[i]);
    flight->Close();
  }};

  log::info("[{}] {}: {} prompt tokens, max_tokens {}, n {}, stream {}", id, path,
            prompt_ids.size(), req.params.max_tokens, req.n, req.stream);
  submitted = true;
  for (int i = 0; i < req.n; ++i) {
    GenerateRequest g{ids[i], prompt_ids, req.params};
    if (req.params.seed) g.params.seed = *req.params.seed + static_cast<uint64_t>(i);
    Status st = s->engine->Submit(std::move(g), [flight](RequestOutput out) {
      flight->Deliver(std::move(out));
    });
    if (!st.ok()) {
      gen.MarkNotSubmitted(i);
      co_return co_await reject(SubmitError(st));
    }
  }
  w.OnDisconnect([flight] { flight->CancelAll(); });

  auto client_gone = [&] {
    status = 499;
    log::info("[{}] client disconnected; cancelled", id);
  };

  if (!req.stream) {
    std::optional<ApiError> failure;
    while (gen.num_unfinished() > 0) {
      std::optional<RequestOutput> out = co_await flight->Receive();
      if (!out) break;
      if (gen.Apply(*out) < 0) continue;
      if (Failed(*out) && !failure) failure = EngineFailure(id, *out);
      if (failure || w.client_gone()) break;
    }
    if (w.client_gone()) co_return client_gone();
    if (failure) co_return co_await reject(*failure);
    if (!co_await w.WriteFull(200, kJson, gen.Body(), headers)) co_return client_gone();
    log::info("[{}] done: {}, usage {} in {:.3f} s", id, gen.FinishReasons(), Dump(gen.Usage()),
              Seconds(Clock::now() - start));
    co_return;
  }

  // Streaming: wait for the first output so that an early failure is a proper HTTP error.
  std::optional<RequestOutput> out;
  int index = -1;
  while (index < 0) {
    out = co_await flight->Receive();
    if (!out) co_return;
    index = gen.Apply(*out);
  }
  if (w.client_gone()) co_return client_gone();
  if (Failed(*out)) co_return co_await reject(EngineFailure(id, *out));
  headers["cache-control"] = "no-cache";
  if (!co_await w.StartStream(200, "text/event-stream", headers)) co_return client_gone();
  std::string data = gen.OpeningChunks();
  while (true) {
    if (Failed(*out)) {
      ApiError e = EngineFailure(id, *out);
      status = e.status;
      log::warn("[{}] failed mid-stream: {}", id, e.message);
      data += "data: " + e.Body() + "\n\n";
      data += kSseDone;
      if (co_await w.WriteChunk(std::move(data))) co_await w.EndStream();
      co_return;
    }
    data += gen.Chunks(index, *out);
    if (gen.num_unfinished() == 0) break;
    if (!data.empty() && !co_await w.WriteChunk(std::move(data))) co_return client_gone();
    data.clear();
    do {
      out = co_await flight->Receive();
      if (!out) co_return;
      index = gen.Apply(*out);
    } while (index < 0);
    if (w.client_gone()) co_return client_gone();
  }
  if (req.include_usage) data += SseData(UsageChunkJson(gen.header(), chat, gen.Usage()));
  data += kSseDone;
  if (!co_await w.WriteChunk(std::move(data))) co_return client_gone();
  co_await w.EndStream();
  log::info("[{}] done (stream): {}, usage {} in {:.3f} s", id, gen.FinishReasons(),
            Dump(gen.Usage()), Seconds(Clock::now() - start));
}

}  // namespace tandem::openai
