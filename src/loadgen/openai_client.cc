#include "loadgen/openai_client.h"

#include <nlohmann/json.hpp>

namespace tandem::bench {

namespace asio = boost::asio;
using json = nlohmann::json;

const char* ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kNone: return "none";
    case ErrorKind::kHttpStatus: return "http";
    case ErrorKind::kConnection: return "connection";
    case ErrorKind::kTimeout: return "timeout";
    case ErrorKind::kBadStream: return "bad_stream";
  }
  return "?";
}

std::string RequestRecord::ErrorKey() const {
  if (error == ErrorKind::kHttpStatus) return "http_" + std::to_string(http_status);
  return ErrorKindName(error);
}

std::string BuildRequestBody(const ClientOptions& options, const WorkItem& item, int turn,
                             const std::vector<std::string>& replies) {
  json body{{"model", options.model},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}},
            {"max_tokens", item.turns[turn].output_tokens},
            {"temperature", 0}};
  if (options.ignore_eos) body["ignore_eos"] = true;
  if (options.chat) {
    json messages = json::array();
    if (!item.system.empty()) messages.push_back({{"role", "system"}, {"content", item.system}});
    for (int t = 0; t <= turn; ++t) {
      messages.push_back({{"role", "user"}, {"content", item.turns[t].text}});
      if (t < turn) messages.push_back({{"role", "assistant"}, {"content", replies[t]}});
    }
    body["messages"] = std::move(messages);
  } else {
    std::string prompt = item.system;
    for (int t = 0; t <= turn; ++t) {
      prompt += item.turns[t].text;
      if (t < turn) prompt += replies[t];
    }
    body["prompt"] = std::move(prompt);
  }
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool StreamReader::Bad(std::string message) {
  if (record_.error == ErrorKind::kNone) {
    record_.error = ErrorKind::kBadStream;
    record_.error_message = std::move(message);
  }
  return false;
}

bool StreamReader::OnData(std::string_view bytes, Clock::time_point now) {
  for (const SseEvent& e : parser_.Feed(bytes)) {
    if (!OnEvent(e, now)) return false;
  }
  return true;
}

void StreamReader::Finish() {
  for (const SseEvent& e : parser_.Finish()) {
    if (!OnEvent(e, Clock::now())) return;
  }
  if (!done_) Bad("the stream ended without data: [DONE]");
}

bool StreamReader::OnEvent(const SseEvent& event, Clock::time_point now) {
  if (record_.error != ErrorKind::kNone) return false;
  if (done_) return Bad("data after [DONE]");
  if (event.data == "[DONE]") {
    done_ = true;
    return true;
  }
  json j = json::parse(event.data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Bad("an event is not a JSON object");
  if (j.contains("error")) {
    const json& err = j["error"];
    return Bad("error event: " + (err.is_object() && err.contains("message") && err["message"].is_string()
                                      ? err["message"].get<std::string>()
                                      : err.dump()));
  }
  if (j.contains("choices")) {
    const json& choices = j["choices"];
    if (!choices.is_array()) return Bad("choices is not an array");
    for (const json& c : choices) {
      const json* text = nullptr;
      bool reasoning = false;  // delta.reasoning_content: output for the clock, not for the reply
      if (c.contains("delta") && c["delta"].is_object()) {
        const json& d = c["delta"];
        auto nonempty = [](const json& v) { return v.is_string() && !v.get_ref<const std::string&>().empty(); };
        if (d.contains("content") && nonempty(d["content"])) {
          text = &d["content"];
        } else if (d.contains("reasoning_content") && nonempty(d["reasoning_content"])) {
          text = &d["reasoning_content"];
          reasoning = true;
        }
      } else if (c.contains("text")) {
        text = &c["text"];
      }
      if (text && text->is_string() && !text->get_ref<const std::string&>().empty()) {
        const double t = std::chrono::duration<double>(now - start_).count();
        if (record_.chunk_times_s.empty()) record_.ttft_s = t;
        record_.chunk_times_s.push_back(t);
        if (!reasoning) record_.output_text += text->get_ref<const std::string&>();
      }
    }
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const json& u = j["usage"];
    if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
      record_.prompt_tokens = u["prompt_tokens"].get<int>();
    if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer())
      record_.completion_tokens = u["completion_tokens"].get<int>();
    if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object()) {
      const json& d = u["prompt_tokens_details"];
      if (d.contains("cached_tokens") && d["cached_tokens"].is_number_integer())
        record_.cached_tokens = d["cached_tokens"].get<int>();
    }
  }
  return true;
}

namespace {

std::vector<std::pair<std::string, std::string>> AuthHeaders(const ClientOptions& options) {
  if (options.api_key.empty()) return {};
  return {{"Authorization", "Bearer " + options.api_key}};
}

Clock::time_point Deadline(const ClientOptions& options) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(options.timeout_s));
}

}  // namespace

asio::awaitable<RequestRecord> SendTurn(HttpConnection& connection, const ClientOptions& options,
                                        const WorkItem& item, int turn,
                                        const std::vector<std::string>& replies,
                                        Clock::time_point run_start) {
  RequestRecord record;
  record.item_id = item.id;
  record.turn = turn;
  record.phase = item.phase;
  record.expected_input_tokens = item.system_tokens;
  for (int t = 0; t <= turn; ++t) record.expected_input_tokens += item.turns[t].input_tokens;
  record.expected_output_tokens = item.turns[turn].output_tokens;
  std::string body = BuildRequestBody(options, item, turn, replies);
  const auto start = Clock::now();
  record.start_s = std::chrono::duration<double>(start - run_start).count();
  StreamReader reader(record, start);
  HttpResult result = co_await connection.Request(
      "POST", options.chat ? "/v1/chat/completions" : "/v1/completions", std::move(body),
      AuthHeaders(options), Deadline(options),
      [&reader](std::string_view bytes, Clock::time_point now) { return reader.OnData(bytes, now); });
  record.e2e_s = std::chrono::duration<double>(Clock::now() - start).count();
  record.http_status = result.status;
  if (result.error != ErrorKind::kNone) {
    record.error = result.error;
    record.error_message = result.message;
  } else if (record.ok()) {
    reader.Finish();
  }
  co_return record;
}

asio::awaitable<Result<std::string>> FetchFirstModel(HttpConnection& connection,
                                                     const ClientOptions& options) {
  std::string body;
  HttpResult result = co_await connection.Request(
      "GET", "/v1/models", "", AuthHeaders(options), Clock::now() + std::chrono::seconds(30),
      [&body](std::string_view bytes, Clock::time_point) {
        body.append(bytes);
        return true;
      });
  if (result.error != ErrorKind::kNone)
    co_return Err(StatusCode::kFailedPrecondition, "GET /v1/models: {} {}",
                  result.status ? std::to_string(result.status) : ErrorKindName(result.error),
                  result.message);
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].contains("id") || !j["data"][0]["id"].is_string())
    co_return Err(StatusCode::kFailedPrecondition, "GET /v1/models: no model listed");
  co_return j["data"][0]["id"].get<std::string>();
}

}  // namespace tandem::bench
