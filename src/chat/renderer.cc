// ChatTemplate (parse + render entry points) and ChatRenderer (model directory loading, special
// token placeholders and literal ranges). See chat_template.h.
#include <algorithm>
#include <filesystem>

#include "chat/eval.h"
#include "chat/template.h"
#include "chat/text.h"
#include "common/file_util.h"

namespace tandem {

struct ChatTemplate::Impl {
  chat::Body body;
};

Result<ChatTemplate> ChatTemplate::Parse(const std::string& source) {
  try {
    auto impl = std::make_shared<Impl>();
    impl->body = chat::ParseTemplate(chat::Lex(source));
    ChatTemplate t;
    t.impl_ = std::move(impl);
    return t;
  } catch (const chat::TemplateError& e) {
    return Status(StatusCode::kInvalidArgument, e.what());
  } catch (const std::exception& e) {  // as Render: no exception leaves the parser
    return Status(StatusCode::kInvalidArgument, std::string("chat template error: ") + e.what());
  }
}

Result<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context,
                                         const ChatTemplateLimits& limits) const {
  if (!impl_) return Status(StatusCode::kFailedPrecondition, "chat template not parsed");
  if (!context.is_object()) return Status(StatusCode::kInvalidArgument, "chat template context must be an object");
  chat::ScopedLimits scoped(limits);
  try {
    auto root = std::make_shared<chat::Frame>();
    chat::AddGlobals(*root);
    for (auto it = context.begin(); it != context.end(); ++it) (*root)[it.key()] = chat::FromJson(it.value());
    chat::Evaluator ev(root);
    std::string out;
    ev.Render(impl_->body, out);
    return out;
  } catch (const chat::TemplateError& e) {
    return Status(StatusCode::kInvalidArgument, e.what());
  } catch (const std::exception& e) {
    return Status(StatusCode::kInvalidArgument, std::string("chat template error: ") + e.what());
  }
}

namespace {

constexpr char32_t kOpen = 0xE000, kClose = 0xE001, kDigit0 = 0xE010;

struct Placeholders {
  std::vector<std::string> texts;  // by index: the original text
  std::vector<bool> literal;       // by index: a special token (recorded as a literal range)
};

std::string MakePlaceholder(size_t index) {
  std::string out;
  chat::AppendUtf8(out, kOpen);
  for (char c : std::to_string(index)) chat::AppendUtf8(out, kDigit0 + (c - '0'));
  chat::AppendUtf8(out, kClose);
  return out;
}

// Replaces special-token texts (longest first) and U+E000 in `s` by placeholders.
std::string Protect(const std::string& s, const std::vector<std::string>& specials, Placeholders& ph) {
  static const std::string kOpenUtf8 = [] {
    std::string o;
    chat::AppendUtf8(o, kOpen);
    return o;
  }();
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const std::string* hit = nullptr;
    bool literal = true;
    for (const auto& t : specials) {
      if (s.compare(i, t.size(), t) == 0) {
        hit = &t;
        break;
      }
    }
    if (!hit && s.compare(i, kOpenUtf8.size(), kOpenUtf8) == 0) {
      hit = &kOpenUtf8;
      literal = false;
    }
    if (!hit) {
      out.push_back(s[i++]);
      continue;
    }
    out += MakePlaceholder(ph.texts.size());
    ph.texts.push_back(*hit);
    ph.literal.push_back(literal);
    i += hit->size();
  }
  return out;
}

void ProtectJson(nlohmann::ordered_json& j, const std::vector<std::string>& specials, Placeholders& ph) {
  if (j.is_string()) {
    j = Protect(j.get<std::string>(), specials, ph);
  } else if (j.is_array() || j.is_object()) {
    for (auto& v : j) ProtectJson(v, specials, ph);
  }
}

RenderedChat Restore(const std::string& text, const Placeholders& ph) {
  RenderedChat r;
  std::string open, close;
  chat::AppendUtf8(open, kOpen);
  chat::AppendUtf8(close, kClose);
  size_t i = 0;
  while (i < text.size()) {
    size_t k = ph.texts.empty() ? std::string::npos : text.find(open, i);
    if (k == std::string::npos) {
      r.text.append(text, i, std::string::npos);
      break;
    }
    r.text.append(text, i, k - i);
    // Digits are 3-byte code points U+E010..U+E019 (EE 80 90..99).
    size_t p = k + open.size();
    size_t index = 0;
    int ndigits = 0;
    while (p + 3 <= text.size() && static_cast<unsigned char>(text[p]) == 0xEE &&
           static_cast<unsigned char>(text[p + 1]) == 0x80 && static_cast<unsigned char>(text[p + 2]) >= 0x90 &&
           static_cast<unsigned char>(text[p + 2]) <= 0x99 && ndigits < 12) {
      index = index * 10 + (static_cast<unsigned char>(text[p + 2]) - 0x90);
      p += 3;
      ++ndigits;
    }
    if (ndigits == 0 || text.compare(p, close.size(), close) != 0 || index >= ph.texts.size()) {
      r.text.append(open);  // not one of ours (cannot happen for input text, which is escaped)
      i = k + open.size();
      continue;
    }
    size_t begin = r.text.size();
    r.text += ph.texts[index];
    if (ph.literal[index]) r.literal_ranges.emplace_back(begin, r.text.size());
    i = p + close.size();
  }
  return r;
}

std::optional<std::string> TokenText(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

Result<ChatRenderer> ChatRenderer::Load(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const std::string config_path = (fs::path(model_dir) / "tokenizer_config.json").string();
  const std::string jinja_path = (fs::path(model_dir) / "chat_template.jinja").string();
  nlohmann::json config = nlohmann::json::object();
  std::error_code ec;
  if (fs::exists(config_path, ec)) {
    TANDEM_ASSIGN_OR_RETURN(config, ReadJsonFile(config_path));
  }
  std::string source;
  bool found = false;
  if (fs::exists(jinja_path, ec)) {
    TANDEM_ASSIGN_OR_RETURN(source, ReadFile(jinja_path));
    found = true;
  } else if (config.contains("chat_template")) {
    const auto& ct = config["chat_template"];
    if (ct.is_string()) {
      source = ct.get<std::string>();
      found = true;
    } else if (ct.is_array()) {
      for (const auto& entry : ct) {
        if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
            entry["template"].is_string()) {
          source = entry["template"].get<std::string>();
          found = true;
        }
      }
      if (!found) return Err(StatusCode::kNotFound, "{}: chat_template list has no \"default\" entry", config_path);
    }
  }
  if (!found) return Err(StatusCode::kNotFound, "no chat template in {} (tokenizer_config.json or chat_template.jinja)", model_dir);
  auto parsed = ChatTemplate::Parse(source);
  if (!parsed.ok()) return Err(StatusCode::kInvalidArgument, "chat template of {}: {}", model_dir, parsed.status().message());
  ChatRenderer r(std::move(parsed).value());
  r.source_ = source;
  if (config.contains("bos_token")) r.bos_token_ = TokenText(config["bos_token"]);
  if (config.contains("eos_token")) r.eos_token_ = TokenText(config["eos_token"]);
  if (config.contains("added_tokens_decoder") && config["added_tokens_decoder"].is_object()) {
    for (const auto& [id, tok] : config["added_tokens_decoder"].items()) {
      if (tok.is_object() && tok.value("special", false) && tok.contains("content") && tok["content"].is_string()) {
        std::string text = tok["content"].get<std::string>();
        if (!text.empty()) r.special_token_texts_.push_back(std::move(text));
      }
    }
  }
  // Longest first, so a token that is a prefix of another never wins.
  std::stable_sort(r.special_token_texts_.begin(), r.special_token_texts_.end(),
                   [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return r;
}

Result<RenderedChat> ChatRenderer::Render(const nlohmann::ordered_json& messages, const ChatOptions& options) const {
  if (!messages.is_array()) return Status(StatusCode::kInvalidArgument, "messages must be a list");
  Placeholders ph;
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = messages;
  ProtectJson(context["messages"], special_token_texts_, ph);
  context["tools"] = options.tools;
  ProtectJson(context["tools"], special_token_texts_, ph);
  context["documents"] = nullptr;
  context["add_generation_prompt"] = options.add_generation_prompt;
  if (bos_token_) context["bos_token"] = *bos_token_;
  if (eos_token_) context["eos_token"] = *eos_token_;
  if (options.extra_kwargs.is_object())
    for (auto it = options.extra_kwargs.begin(); it != options.extra_kwargs.end(); ++it) context[it.key()] = it.value();
  TANDEM_ASSIGN_OR_RETURN(std::string text, template_.Render(context));
  return Restore(text, ph);
}

}  // namespace tandem
