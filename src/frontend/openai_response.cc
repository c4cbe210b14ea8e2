#include "frontend/openai_response.h"

#include <chrono>
#include <cmath>
#include <random>

#include <fmt/format.h>

namespace tandem::openai {

std::string NewResponseId(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}() ^
                                   static_cast<uint64_t>(std::chrono::steady_clock::now()
                                                             .time_since_epoch().count())};
  return fmt::format("{}{:016x}{:016x}", prefix, rng(), rng());
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string Utf8Lossy(std::string_view s) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  while (i < s.size()) {
    unsigned char c = byte(i);
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // Length and the valid range of the second byte (Unicode Table 3-7).
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    if (len == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    size_t k = 1;  // bytes of the maximal valid subpart
    while (k < static_cast<size_t>(len) && i + k < s.size()) {
      unsigned char b = byte(i + k);
      bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
      if (!ok) break;
      ++k;
    }
    if (k == static_cast<size_t>(len)) out.append(s.substr(i, k));
    else out += kReplacement;
    i += k;
  }
  return out;
}

std::string Dump(const ojson& j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string SseData(const ojson& j) { return "data: " + Dump(j) + "\n\n"; }

const char* FinishReasonString(FinishReason reason) {
  return reason == FinishReason::kLength ? "length" : "stop";
}

const char* ChatFinishReason(FinishReason reason, bool tool_calls) {
  return tool_calls && reason != FinishReason::kLength ? "tool_calls" : FinishReasonString(reason);
}

namespace {

double Lp(float v) { return std::isfinite(v) ? static_cast<double>(v) : -9999.0; }

ojson BytesJson(const std::string& raw) {
  ojson b = ojson::array();
  for (unsigned char c : raw) b.push_back(static_cast<int>(c));
  return b;
}

ojson ChoiceLogprobsOrNull(bool want, const ojson& value) { return want ? value : ojson(nullptr); }

}  // namespace

ojson ChatLogprobEntries(const std::vector<TokenLogprob>& logprobs, const Tokenizer& tokenizer) {
  ojson content = ojson::array();
  for (const TokenLogprob& lp : logprobs) {
    std::string raw = tokenizer.TokenBytes(lp.token_id);
    ojson top = ojson::array();
    for (const auto& [id, v] : lp.top) {
      std::string tr = tokenizer.TokenBytes(id);
      top.push_back(ojson{{"token", Utf8Lossy(tr)}, {"logprob", Lp(v)}, {"bytes", BytesJson(tr)}});
    }
    content.push_back(ojson{{"token", Utf8Lossy(raw)},
                            {"logprob", Lp(lp.logprob)},
                            {"bytes", BytesJson(raw)},
                            {"top_logprobs", std::move(top)}});
  }
  return content;
}

void CompletionLogprobs::Append(const std::vector<TokenLogprob>& logprobs,
                                const Tokenizer& tokenizer) {
  for (const TokenLogprob& lp : logprobs) {
    std::string text = Utf8Lossy(tokenizer.TokenBytes(lp.token_id));
    ojson top = ojson::object();
    for (const auto& [id, v] : lp.top) top[Utf8Lossy(tokenizer.TokenBytes(id))] = Lp(v);
    if (!top.contains(text)) top[text] = Lp(lp.logprob);
    tokens_.push_back(text);
    token_logprobs_.push_back(Lp(lp.logprob));
    top_logprobs_.push_back(std::move(top));
    text_offset_.push_back(offset_);
    offset_ += text.size();
  }
}

ojson CompletionLogprobs::ToJson() const {
  return ojson{{"tokens", tokens_},
               {"token_logprobs", token_logprobs_},
               {"top_logprobs", top_logprobs_},
               {"text_offset", text_offset_}};
}

ojson UsageJson(int prompt_tokens, int completion_tokens, int cached_tokens, int reasoning_tokens) {
  ojson u{{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", ojson{{"cached_tokens", cached_tokens}}}};
  if (reasoning_tokens >= 0) u["completion_tokens_details"] = ojson{{"reasoning_tokens", reasoning_tokens}};
  return u;
}

ojson ChatCompletionJson(const ResponseHeader& h, const std::vector<ChoiceResult>& choices,
                         bool want_logprobs, const Tokenizer& tokenizer, const ojson& usage) {
  ojson cs = ojson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    ojson logprobs = ChoiceLogprobsOrNull(
        want_logprobs, ojson{{"content", ChatLogprobEntries(c.logprobs, tokenizer)}});
    ojson message = c.message.is_null() ? ojson{{"role", "assistant"}, {"content", c.text}} : c.message;
    cs.push_back(ojson{{"index", i},
                       {"message", std::move(message)},
                       {"logprobs", std::move(logprobs)},
                       {"finish_reason", ChatFinishReason(c.finish_reason, c.tool_calls)}});
  }
  return ojson{{"id", h.id},           {"object", "chat.completion"}, {"created", h.created},
               {"model", h.model},     {"choices", std::move(cs)},    {"usage", usage}};
}

ojson CompletionJson(const ResponseHeader& h, const std::vector<ChoiceResult>& choices,
                     bool want_logprobs, size_t echo_len, const Tokenizer& tokenizer,
                     const ojson& usage) {
  ojson cs = ojson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    ojson logprobs = nullptr;
    if (want_logprobs) {
      CompletionLogprobs lp(echo_len);
      lp.Append(c.logprobs, tokenizer);
      logprobs = lp.ToJson();
    }
    cs.push_back(ojson{{"index", i},
                       {"text", c.text},
                       {"logprobs", std::move(logprobs)},
                       {"finish_reason", FinishReasonString(c.finish_reason)}});
  }
  return ojson{{"id", h.id},       {"object", "text_completion"}, {"created", h.created},
               {"model", h.model}, {"choices", std::move(cs)},    {"usage", usage}};
}

ojson ChatChunkJson(const ResponseHeader& h, int index, ojson delta, ojson logprobs,
                    ojson finish_reason, bool include_usage) {
  ojson choice{{"index", index},
               {"delta", std::move(delta)},
               {"logprobs", std::move(logprobs)},
               {"finish_reason", std::move(finish_reason)}};
  ojson j{{"id", h.id},
          {"object", "chat.completion.chunk"},
          {"created", h.created},
          {"model", h.model},
          {"choices", ojson::array({std::move(choice)})}};
  if (include_usage) j["usage"] = nullptr;
  return j;
}

ojson CompletionChunkJson(const ResponseHeader& h, int index, std::string text, ojson logprobs,
                          ojson finish_reason, bool include_usage) {
  ojson choice{{"index", index},
               {"text", std::move(text)},
               {"logprobs", std::move(logprobs)},
               {"finish_reason", std::move(finish_reason)}};
  ojson j{{"id", h.id},
          {"object", "text_completion"},
          {"created", h.created},
          {"model", h.model},
          {"choices", ojson::array({std::move(choice)})}};
  if (include_usage) j["usage"] = nullptr;
  return j;
}

ojson UsageChunkJson(const ResponseHeader& h, bool chat, const ojson& usage) {
  return ojson{{"id", h.id},
               {"object", chat ? "chat.completion.chunk" : "text_completion"},
               {"created", h.created},
               {"model", h.model},
               {"choices", ojson::array()},
               {"usage", usage}};
}

}  // namespace tandem::openai
