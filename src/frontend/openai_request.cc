#include "frontend/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "chat/prompt.h"
#include "common/json_limits.h"
#include "frontend/errors.h"
#include "frontend/structured_output_params.h"
#include "frontend/tool_params.h"

namespace tandem::openai {

using ojson = nlohmann::ordered_json;

std::string ApiError::Body() const { return http::OpenAIErrorBody(message, type, param, code); }

namespace {

ApiError InvalidValue(std::string param, std::string message) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = "invalid_value";
  return e;
}

ApiError InvalidType(const std::string& param, const char* expected, const ojson& got) {
  ApiError e;
  const char* what = got.is_array() ? "an array" : got.is_object() ? "an object"
                     : got.is_null() ? "null" : nullptr;
  std::string got_name = what ? what : fmt::format("a {}", got.type_name());
  e.message = fmt::format("Invalid type for '{}': expected {}, but got {} instead.", param,
                          expected, got_name);
  e.param = param;
  e.code = "invalid_type";
  return e;
}

// Field readers: absent or null leaves *out as it is; a wrong type is an error.
const ojson* Field(const ojson& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<ApiError> ReadBool(const ojson& obj, const char* key, bool* out) {
  const ojson* v = Field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return InvalidType(key, "a boolean", *v);
  *out = v->get<bool>();
  return std::nullopt;
}

// Integers; an integral float (10.0) is accepted as pydantic does.
bool AsInt64(const ojson& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    *out = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
               ? std::numeric_limits<int64_t>::max()
               : static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) {
      *out = static_cast<int64_t>(d);
      return true;
    }
  }
  return false;
}

std::optional<ApiError> ReadInt(const ojson& obj, const char* key, std::optional<int64_t>* out) {
  const ojson* v = Field(obj, key);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (!AsInt64(*v, &x)) return InvalidType(key, "an integer", *v);
  *out = x;
  return std::nullopt;
}

std::optional<ApiError> ReadNumber(const ojson& obj, const char* key, std::optional<double>* out) {
  const ojson* v = Field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) return InvalidType(key, "a number", *v);
  *out = v->get<double>();
  return std::nullopt;
}

#define TANDEM_TRY(expr)                         \
  do {                                           \
    if (auto _err = (expr)) return _err;         \
  } while (0)

int ClampToInt(int64_t v) {
  return static_cast<int>(std::clamp<int64_t>(v, std::numeric_limits<int>::min(),
                                              std::numeric_limits<int>::max()));
}

// A number in [lo, hi] (open ends when lo_open / hi_open), checked both as given and as the
// 32-bit float the engine will see: 1e308 overflows to inf and 5e-324 rounds to 0.0f, which pass a
// check on the double but not the engine's on the float. `hi` infinite: no upper bound.
std::optional<ApiError> ReadRange(const ojson& obj, const char* key, double lo, bool lo_open,
                                  double hi, bool hi_open, float* out) {
  std::optional<double> v;
  TANDEM_TRY(ReadNumber(obj, key, &v));
  if (!v) return std::nullopt;
  auto in_range = [&](double x) {
    return std::isfinite(x) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
  };
  const float f = static_cast<float>(*v);  // inf when beyond FLT_MAX
  if (!in_range(*v) || !in_range(static_cast<double>(f))) {
    if (std::isinf(hi))
      return InvalidValue(key, fmt::format("'{}' must be a finite number {} {} (as a 32-bit float), "
                                           "got {}.", key, lo_open ? "greater than" : "at least",
                                           lo, *v));
    return InvalidValue(key, fmt::format("'{}' must be in {}{}, {}{} (as a 32-bit float), got {}.",
                                         key, lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]", *v));
  }
  *out = f;
  return std::nullopt;
}

ApiError NotSupported(const std::string& param, const std::string& what) {
  return InvalidValue(param, fmt::format("{} is not supported.", what));
}

// Parameters the engine has no implementation for: 400 unless in the no-op form clients send by
// default (logit_bias {}, min_tokens 0, include_stop_str_in_output false), rather than accepting
// and ignoring them. (response_format: structured_output_params.h.)
std::optional<ApiError> RejectUnsupported(const ojson& body) {
  if (const ojson* lb = Field(body, "logit_bias")) {
    if (!lb->is_object()) return InvalidType("logit_bias", "an object", *lb);
    if (!lb->empty()) return NotSupported("logit_bias", "'logit_bias'");
  }
  std::optional<int64_t> min_tokens;
  TANDEM_TRY(ReadInt(body, "min_tokens", &min_tokens));
  if (min_tokens && *min_tokens < 0)
    return InvalidValue("min_tokens", fmt::format("'min_tokens' must be at least 0, got {}.", *min_tokens));
  if (min_tokens && *min_tokens > 0) return NotSupported("min_tokens", "'min_tokens' above 0");
  bool include_stop = false;
  TANDEM_TRY(ReadBool(body, "include_stop_str_in_output", &include_stop));
  if (include_stop)
    return NotSupported("include_stop_str_in_output", "'include_stop_str_in_output': true");
  return std::nullopt;
}

std::optional<ApiError> ParseCommon(const ojson& body, const ParseOptions& options,
                                    ParsedRequest* out) {
  if (const ojson* m = Field(body, "model")) {
    if (!m->is_string()) return InvalidType("model", "a string", *m);
    const std::string& name = m->get_ref<const std::string&>();
    if (name != options.served_model_name) {
      ApiError e;
      e.status = 404;
      e.message = fmt::format("The model `{}` does not exist.", http::ClientText(name));
      e.param = "model";
      e.code = "model_not_found";
      return e;
    }
  }
  TANDEM_TRY(ReadBool(body, "stream", &out->stream));
  if (const ojson* so = Field(body, "stream_options")) {
    if (!so->is_object()) return InvalidType("stream_options", "an object", *so);
    bool include_usage = false;
    if (const ojson* iu = Field(*so, "include_usage")) {
      if (!iu->is_boolean()) return InvalidType("stream_options.include_usage", "a boolean", *iu);
      include_usage = iu->get<bool>();
    }
    out->include_usage = out->stream && include_usage;
  }

  std::optional<int64_t> n;
  TANDEM_TRY(ReadInt(body, "n", &n));
  if (n) {
    if (*n < 1 || *n > options.max_n)
      return InvalidValue("n", fmt::format("'n' must be between 1 and {}, got {}.", options.max_n, *n));
    out->n = static_cast<int>(*n);
  }

  // max_completion_tokens (chat) wins over the deprecated max_tokens.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (std::string_view(key) == "max_completion_tokens" &&
        out->endpoint != Endpoint::kChatCompletions)
      continue;
    std::optional<int64_t> mt;
    TANDEM_TRY(ReadInt(body, key, &mt));
    if (!mt) continue;
    if (*mt <= 0)
      return InvalidValue(key, fmt::format("'{}' must be at least 1, got {}.", key, *mt));
    out->max_tokens = ClampToInt(*mt);
    out->max_tokens_param = key;
  }

  SamplingParams& p = out->params;
  // The model's defaults first (generation_config.json); what the request sets wins.
  const SamplingDefaults& d = options.sampling_defaults;
  out->max_tokens_cap = d.max_tokens;
  if (d.temperature) p.temperature = *d.temperature;
  if (d.top_p) p.top_p = *d.top_p;
  if (d.top_k) p.top_k = *d.top_k;
  if (d.min_p) p.min_p = *d.min_p;
  if (d.repetition_penalty) p.repetition_penalty = *d.repetition_penalty;
  TANDEM_TRY(ReadRange(body, "temperature", 0.0, false, 2.0, false, &p.temperature));
  TANDEM_TRY(ReadRange(body, "top_p", 0.0, true, 1.0, false, &p.top_p));
  TANDEM_TRY(ReadRange(body, "min_p", 0.0, false, 1.0, false, &p.min_p));
  TANDEM_TRY(ReadRange(body, "frequency_penalty", -2.0, false, 2.0, false, &p.frequency_penalty));
  TANDEM_TRY(ReadRange(body, "presence_penalty", -2.0, false, 2.0, false, &p.presence_penalty));
  TANDEM_TRY(ReadRange(body, "repetition_penalty", 0.0, true,
                       std::numeric_limits<double>::infinity(), false, &p.repetition_penalty));
  std::optional<int64_t> top_k;
  TANDEM_TRY(ReadInt(body, "top_k", &top_k));
  if (top_k) {
    if (*top_k < -1)
      return InvalidValue("top_k", fmt::format("'top_k' must be -1 (disabled) or at least 0, got {}.", *top_k));
    p.top_k = ClampToInt(*top_k);
  }
  // A 64-bit signed integer, as vLLM takes it; beyond, every value would clamp to the same seed.
  if (const ojson* s = Field(body, "seed"); s && s->is_number_unsigned() &&
                                            s->get<uint64_t>() > static_cast<uint64_t>(
                                                                     std::numeric_limits<int64_t>::max())) {
    return InvalidValue("seed", fmt::format("'seed' must be at most {}, got {}.",
                                            std::numeric_limits<int64_t>::max(), s->get<uint64_t>()));
  }
  std::optional<int64_t> seed;
  TANDEM_TRY(ReadInt(body, "seed", &seed));
  if (seed) p.seed = static_cast<uint64_t>(*seed);

  if (const ojson* stop = Field(body, "stop")) {
    if (stop->is_string()) {
      if (!stop->get_ref<const std::string&>().empty()) p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const ojson& s : *stop) {
        if (!s.is_string()) return InvalidType("stop", "a string or a list of strings", *stop);
        if (!s.get_ref<const std::string&>().empty()) p.stop.push_back(s.get<std::string>());
      }
    } else {
      return InvalidType("stop", "a string or a list of strings", *stop);
    }
  }
  if (const ojson* ids = Field(body, "stop_token_ids")) {
    if (!ids->is_array()) return InvalidType("stop_token_ids", "a list of integers", *ids);
    for (const ojson& id : *ids) {
      int64_t x = 0;
      if (!AsInt64(id, &x)) return InvalidType("stop_token_ids", "a list of integers", *ids);
      p.stop_token_ids.push_back(ClampToInt(x));
    }
  }
  TANDEM_TRY(ReadBool(body, "ignore_eos", &p.ignore_eos));
  TANDEM_TRY(ReadBool(body, "skip_special_tokens", &p.skip_special_tokens));
  if (const ojson* user = Field(body, "user"); user && !user->is_string())
    return InvalidType("user", "a string", *user);
  if (auto e = ParseStructuredOutput(body, &p)) return e;
  return RejectUnsupported(body);
}

const char* const kRoles[] = {"system", "developer", "user", "assistant", "tool"};

std::optional<ApiError> ParseMessages(const ojson& body, ParsedRequest* out) {
  const ojson* messages = Field(body, "messages");
  if (!messages) return InvalidValue("messages", "'messages' is required.");
  if (!messages->is_array()) return InvalidType("messages", "an array", *messages);
  if (messages->empty()) return InvalidValue("messages", "'messages' must not be empty.");
  out->messages = ojson::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const ojson& m = (*messages)[i];
    std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) return InvalidType(where, "an object", m);
    const ojson* role = Field(m, "role");
    if (!role) return InvalidValue(where + ".role", fmt::format("'{}.role' is required.", where));
    if (!role->is_string()) return InvalidType(where + ".role", "a string", *role);
    std::string r = role->get<std::string>();
    bool known = false;
    for (const char* k : kRoles) known = known || r == k;
    if (!known)
      return InvalidValue(where + ".role",
                          fmt::format("Invalid role '{}' in {}: expected one of system, developer, "
                                      "user, assistant, tool.", http::ClientText(r), where));
    if (const ojson* calls = Field(m, "tool_calls")) {
      if (r != "assistant")
        return InvalidValue(where + ".tool_calls", fmt::format("Only assistant messages may have 'tool_calls' ({}).", where));
      if (!calls->is_array()) return InvalidType(where + ".tool_calls", "an array", *calls);
      for (size_t j = 0; j < calls->size(); ++j) {
        const ojson& c = (*calls)[j];
        std::string cw = fmt::format("{}.tool_calls[{}]", where, j);
        const ojson* f = c.is_object() ? Field(c, "function") : nullptr;
        const ojson* name = f && f->is_object() ? Field(*f, "name") : nullptr;
        if (!name || !name->is_string())
          return InvalidValue(cw + ".function.name", fmt::format("'{}.function.name' is required.", cw));
        if (const ojson* a = Field(*f, "arguments"); a && !a->is_string() && !a->is_object())
          return InvalidType(cw + ".function.arguments", "a string", *a);
      }
    }
    if (const ojson* id = Field(m, "tool_call_id"); id && !id->is_string())
      return InvalidType(where + ".tool_call_id", "a string", *id);
    ojson msg = m;
    if (r == "developer") msg["role"] = "system";  // OpenAI's newer name for system
    const ojson* content = Field(m, "content");
    if (!content) {
      if (r != "assistant")
        return InvalidValue(where + ".content", fmt::format("'{}.content' is required.", where));
      msg["content"] = "";  // templates (Qwen3's) test `'</think>' in content`
    } else if (content->is_array()) {
      std::string text;
      for (size_t j = 0; j < content->size(); ++j) {
        const ojson& part = (*content)[j];
        std::string pw = fmt::format("{}.content[{}]", where, j);
        if (!part.is_object()) return InvalidType(pw, "an object", part);
        const ojson* type = Field(part, "type");
        if (!type || !type->is_string() || type->get<std::string>() != "text")
          return InvalidValue(pw + ".type", fmt::format("Only content parts of type 'text' are "
                                                        "supported ({}).", pw));
        const ojson* t = Field(part, "text");
        if (!t || !t->is_string()) return InvalidType(pw + ".text", "a string", t ? *t : ojson());
        if (j > 0) text += '\n';
        text += t->get<std::string>();
      }
      msg["content"] = text;
    } else if (!content->is_string()) {
      return InvalidType(where + ".content", "a string or an array of content parts", *content);
    }
    out->messages.push_back(std::move(msg));
  }
  return std::nullopt;
}

std::optional<ApiError> ParseChat(const ojson& body, const ParseOptions& options, ParsedRequest* out) {
  TANDEM_TRY(ParseMessages(body, out));
  bool logprobs = false;
  TANDEM_TRY(ReadBool(body, "logprobs", &logprobs));
  std::optional<int64_t> top;
  TANDEM_TRY(ReadInt(body, "top_logprobs", &top));
  if (top) {
    if (*top < 0 || *top > 20)
      return InvalidValue("top_logprobs", fmt::format("'top_logprobs' must be between 0 and 20, got {}.", *top));
    if (!logprobs)
      return InvalidValue("top_logprobs", "'logprobs' must be true when 'top_logprobs' is set.");
  }
  out->params.logprobs = logprobs ? static_cast<int>(top.value_or(0)) : -1;
  TANDEM_TRY(ParseToolParams(body, options.tool_call_format, options.reasoning_parser, out));
  if (const ojson* kw = Field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) return InvalidType("chat_template_kwargs", "an object", *kw);
    out->chat_options.extra_kwargs = *kw;
  }
  TANDEM_TRY(ReadBool(body, "add_generation_prompt", &out->chat_options.add_generation_prompt));
  return std::nullopt;
}

std::optional<ApiError> ParseTokenIds(const ojson& list, std::vector<int32_t>* ids) {
  for (const ojson& v : list) {
    int64_t x = 0;
    if (!AsInt64(v, &x)) return InvalidType("prompt", "a string, an array of strings or token ids", list);
    if (x < 0 || x > std::numeric_limits<int32_t>::max())
      return InvalidValue("prompt", fmt::format("Token id {} in 'prompt' is out of range.", x));
    ids->push_back(static_cast<int32_t>(x));
  }
  return std::nullopt;
}

std::optional<ApiError> ParseCompletion(const ojson& body, ParsedRequest* out) {
  const ojson* prompt = Field(body, "prompt");
  if (!prompt) return InvalidValue("prompt", "'prompt' is required.");
  if (prompt->is_string()) {
    out->prompt_text = prompt->get<std::string>();
  } else if (prompt->is_array()) {
    if (prompt->empty()) return InvalidValue("prompt", "'prompt' must not be empty.");
    const ojson& first = (*prompt)[0];
    if (first.is_string() || first.is_array()) {
      if (prompt->size() > 1)
        return InvalidValue("prompt", "Only one prompt per request is supported.");
      if (first.is_string()) {
        out->prompt_text = first.get<std::string>();
      } else {
        out->prompt_ids.emplace();
        TANDEM_TRY(ParseTokenIds(first, &*out->prompt_ids));
      }
    } else {
      out->prompt_ids.emplace();
      TANDEM_TRY(ParseTokenIds(*prompt, &*out->prompt_ids));
    }
  } else {
    return InvalidType("prompt", "a string, an array of strings or token ids", *prompt);
  }
  TANDEM_TRY(ReadBool(body, "echo", &out->echo));
  std::optional<int64_t> logprobs;
  TANDEM_TRY(ReadInt(body, "logprobs", &logprobs));
  if (logprobs) {
    if (*logprobs < 0 || *logprobs > 20)
      return InvalidValue("logprobs", fmt::format("'logprobs' must be between 0 and 20, got {}.", *logprobs));
    out->params.logprobs = static_cast<int>(*logprobs);
  }
  if (const ojson* suffix = Field(body, "suffix"))
    if (!suffix->is_string() || !suffix->get_ref<const std::string&>().empty())
      return InvalidValue("suffix", "'suffix' is not supported.");
  std::optional<int64_t> best_of;
  TANDEM_TRY(ReadInt(body, "best_of", &best_of));
  if (best_of && *best_of != out->n)
    return InvalidValue("best_of", "'best_of' other than 'n' is not supported.");
  return std::nullopt;
}

// A lower bound on the number of tokens of `text`: each token covers at most max_token_bytes bytes
// of the normalized text, plus whitespace (an added token with lstrip / rstrip swallows
// whitespace around it), and the NF* normalizers keep each ASCII byte other than whitespace as at
// least one byte (one followed by a combining mark may become a 2-byte character). Non-ASCII bytes
// are not counted (NFKC may turn a 3-byte character into 1 byte).
int64_t MinTokens(std::string_view text, int max_token_bytes) {
  int64_t n = 0;
  for (char c : text) {
    const auto b = static_cast<unsigned char>(c);
    n += b < 0x80 && b != ' ' && b != '\t' && b != '\n' && b != '\r' && b != '\v' && b != '\f';
  }
  return (n + max_token_bytes - 1) / max_token_bytes;
}

std::optional<ApiError> TooLongBeforeTokenizing(std::string_view text, int max_token_bytes,
                                                int max_model_len, bool chat) {
  if (max_token_bytes <= 0) return std::nullopt;
  const int64_t min_tokens = MinTokens(text, max_token_bytes);
  if (min_tokens < max_model_len) return std::nullopt;
  const char* where = chat ? "messages" : "prompt";
  ApiError e = InvalidValue(where,
      fmt::format("This model's maximum context length is {} tokens. However, your request has "
                  "at least {} input tokens in the {} ({} bytes), leaving no room for the "
                  "completion. Please reduce the length of the {}.", max_model_len, min_tokens,
                  where, text.size(), where));
  e.code = "context_length_exceeded";
  return e;
}

}  // namespace

int MaxTokenBytes(const Tokenizer& tokenizer) {
  size_t longest = 0;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id)
    longest = std::max(longest, tokenizer.TokenBytes(id).size());
  return static_cast<int>(std::min<size_t>(longest, std::numeric_limits<int>::max()));
}

std::optional<ApiError> ParseRequest(Endpoint endpoint, const std::string& body,
                                     const ParseOptions& options, ParsedRequest* out) {
  out->endpoint = endpoint;
  // nlohmann's parser keeps its own stack (no recursion); ParseBoundedJson's first pass (SAX) bounds
  // the depth and the key comparisons (an object's keys cost quadratic time in ordered_json).
  BoundedJson parsed = ParseBoundedJson(body, kMaxRequestNesting);
  if (parsed.error == JsonParseError::kTooDeep) {
    ApiError e;
    e.message = fmt::format("The request body is nested deeper than {} levels of arrays and objects.",
                            kMaxRequestNesting);
    return e;
  }
  if (parsed.error == JsonParseError::kTooManyKeys) {
    ApiError e;
    e.message = "The request body has objects with too many keys (one object may hold about 11,000 "
                "keys; several large objects count together).";
    return e;
  }
  if (parsed.error != JsonParseError::kNone) {
    ApiError e;
    e.message = "We could not parse the JSON body of your request. (The request body is not "
                "valid JSON.)";
    return e;
  }
  ojson j = std::move(parsed.value);
  if (!j.is_object()) {
    ApiError e;
    e.message = fmt::format("The request body must be a JSON object, got {}.", j.type_name());
    return e;
  }
  TANDEM_TRY(ParseCommon(j, options, out));
  if (endpoint == Endpoint::kChatCompletions) return ParseChat(j, options, out);
  return ParseCompletion(j, out);
}

std::optional<ApiError> TokenizePrompt(ParsedRequest* request, const Tokenizer& tokenizer,
                                       const ChatRenderer* renderer, int max_model_len,
                                       std::vector<int32_t>* prompt_ids, std::string* echo_text,
                                       int max_token_bytes) {
  const bool chat = request->endpoint == Endpoint::kChatCompletions;
  const char* prompt_param = chat ? "messages" : "prompt";
  if (chat) {
    if (!renderer) return InvalidValue("messages", "This model has no chat template; use /v1/completions.");
    auto rendered = renderer->Render(request->messages, request->chat_options);
    if (!rendered.ok())
      return InvalidValue("messages", fmt::format("Could not apply the chat template: {}",
                                                  http::ClientText(rendered.status().message(), 1024)));
    TANDEM_TRY(TooLongBeforeTokenizing(rendered->text, max_token_bytes, max_model_len, true));
    *prompt_ids = EncodeChatPrompt(tokenizer, *rendered);
  } else if (request->prompt_ids) {
    *prompt_ids = *request->prompt_ids;
    for (int32_t id : *prompt_ids)
      if (id >= tokenizer.vocab_size())
        return InvalidValue("prompt", fmt::format("Token id {} in 'prompt' is out of vocabulary (size {}).",
                                                  id, tokenizer.vocab_size()));
    if (request->echo) *echo_text = tokenizer.Decode(*prompt_ids, false);
  } else {
    TANDEM_TRY(TooLongBeforeTokenizing(request->prompt_text, max_token_bytes, max_model_len, false));
    *prompt_ids = tokenizer.Encode(request->prompt_text, false);
    if (request->echo) *echo_text = request->prompt_text;
  }
  if (prompt_ids->empty()) return InvalidValue(prompt_param, "The prompt is empty.");

  const int prompt_len = static_cast<int>(prompt_ids->size());
  const char* where = chat ? "messages" : "prompt";
  if (prompt_len >= max_model_len) {
    ApiError e = InvalidValue(prompt_param,
        fmt::format("This model's maximum context length is {} tokens. However, your request has "
                    "{} input tokens in the {}, leaving no room for the completion. Please reduce "
                    "the length of the {}.", max_model_len, prompt_len, where, where));
    e.code = "context_length_exceeded";
    return e;
  }
  if (request->max_tokens) {
    if (static_cast<int64_t>(prompt_len) + *request->max_tokens > max_model_len) {
      ApiError e = InvalidValue(request->max_tokens_param,
          fmt::format("This model's maximum context length is {} tokens. However, you requested "
                      "{} tokens ({} in the {}, {} in the completion). Please reduce the length "
                      "of the {} or completion.", max_model_len,
                      static_cast<int64_t>(prompt_len) + *request->max_tokens, prompt_len, where,
                      *request->max_tokens, where));
      e.code = "context_length_exceeded";
      return e;
    }
    request->params.max_tokens = *request->max_tokens;
  } else if (chat) {
    request->params.max_tokens = max_model_len - prompt_len;
  } else {
    // OpenAI's and vLLM's default for completions (chat: up to the context).
    request->params.max_tokens = std::min(kDefaultCompletionMaxTokens, max_model_len - prompt_len);
  }
  if (request->max_tokens_cap) request->params.max_tokens = std::min(request->params.max_tokens, *request->max_tokens_cap);
  return std::nullopt;
}

}  // namespace tandem::openai
