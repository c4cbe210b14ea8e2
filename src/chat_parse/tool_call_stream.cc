// The incremental machinery shared by every tool-call format: find a call's start marker (a tag
// anywhere, or a bracket only at the start of the output), collect the call up to its end marker
// (or the end of the output), then parse it as a whole.
#include <algorithm>

#include "chat_parse/tool_calls.h"

namespace tandem::chat_parse {

namespace {

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

}  // namespace

struct ToolCallParser::Spec {
  std::vector<std::string_view> markers;   // start a call anywhere; not part of the region
  std::vector<std::string_view> anchored;  // start a call only as the output's first non-space
                                           // bytes; part of the region
  std::string_view end;                    // empty: the call runs to the end of the output
};

namespace {

const ToolCallParser::Spec kHermesSpec{{"<tool_call>"}, {}, "</tool_call>"};
const ToolCallParser::Spec kLlama3Spec{{"<|python_tag|>"}, {"{"}, ""};
const ToolCallParser::Spec kMistralSpec{{"[TOOL_CALLS]"}, {}, ""};
const ToolCallParser::Spec kPythonicSpec{{"<|python_start|>"}, {"["}, ""};
const ToolCallParser::Spec kNoSpec{{}, {}, ""};

// Whether the end of `s` (JSON text so far) lies inside a string: an odd count of unescaped quotes.
bool InsideJsonString(std::string_view s) {
  bool in = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (in && s[i] == '\\') {
      ++i;  // the escaped character, whatever it is
    } else if (s[i] == '"') {
      in = !in;
    }
  }
  return in;
}

// Whether `s` (a Qwen3-Coder call so far) ends inside a parameter's value: a "<parameter=" after
// the last "</parameter>".
bool InsideOpenParameter(std::string_view s) {
  const size_t open = s.rfind("<parameter=");
  if (open == std::string_view::npos) return false;
  const size_t close = s.rfind("</parameter>");
  return close == std::string_view::npos || close < open;
}

// The longest suffix of s that is a proper prefix of one of `markers`.
size_t PartialSuffix(std::string_view s, const std::vector<std::string_view>& markers) {
  size_t best = 0;
  for (std::string_view m : markers) {
    for (size_t n = std::min(s.size(), m.size() - 1); n > best; --n) {
      if (s.substr(s.size() - n) == m.substr(0, n)) {
        best = n;
        break;
      }
    }
  }
  return best;
}

}  // namespace

std::optional<ToolCallFormat> ParseToolCallFormat(std::string_view name) {
  if (name == "none") return ToolCallFormat::kNone;
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "qwen3_coder") return ToolCallFormat::kQwen3Coder;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  if (name == "mistral") return ToolCallFormat::kMistral;
  if (name == "pythonic") return ToolCallFormat::kPythonic;
  return std::nullopt;
}

const char* ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kQwen3Coder: return "qwen3_coder";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kPythonic: return "pythonic";
    case ToolCallFormat::kNone: break;
  }
  return "none";
}

ToolCallFormat ToolCallFormatForTemplate(std::string_view source) {
  auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
  if (has("<tool_call>") && has("<function=")) return ToolCallFormat::kQwen3Coder;
  if (has("<tool_call>")) return ToolCallFormat::kHermes;
  if (has("[TOOL_CALLS]")) return ToolCallFormat::kMistral;
  if (has("<|python_tag|>") || (has("<|start_header_id|>") && has("\"parameters\""))) return ToolCallFormat::kLlama3Json;
  return ToolCallFormat::kNone;
}

ToolCallParser::ToolCallParser(ToolCallFormat format, const nlohmann::ordered_json* tools)
    : format_(format), tools_(tools) {
  switch (format) {
    case ToolCallFormat::kHermes:
    case ToolCallFormat::kQwen3Coder: spec_ = &kHermesSpec; break;
    case ToolCallFormat::kLlama3Json: spec_ = &kLlama3Spec; break;
    case ToolCallFormat::kMistral: spec_ = &kMistralSpec; break;
    case ToolCallFormat::kPythonic: spec_ = &kPythonicSpec; break;
    case ToolCallFormat::kNone: spec_ = &kNoSpec; break;
  }
}

ToolCallDelta ToolCallParser::Feed(std::string_view text) {
  buf_.append(text);
  ToolCallDelta out;
  Run(out, false);
  return out;
}

ToolCallDelta ToolCallParser::Finish() {
  ToolCallDelta out;
  Run(out, true);
  if (in_call_) Resolve(out);  // a call the output ended in: parse it as it is
  if (num_calls_ == 0 && !pending_ws_.empty()) out.content += pending_ws_;
  pending_ws_.clear();
  return out;
}

void ToolCallParser::EmitContent(ToolCallDelta& out, std::string_view text) {
  std::string all = pending_ws_;
  all.append(text);
  pending_ws_.clear();
  size_t begin = 0;
  if (skip_leading_ws_) {
    while (begin < all.size() && IsSpace(all[begin])) ++begin;
    after_ws_.append(all, 0, begin);
    if (begin == all.size()) return;
    skip_leading_ws_ = false;
    // Text resumes after calls: one separator between it and the text before them (the
    // whitespace the model wrote before the calls, else after them), not the two glued together.
    if (emitted_) out.content += separator_.empty() ? after_ws_ : separator_;
    separator_.clear();
    after_ws_.clear();
  }
  size_t end = all.size();
  while (end > begin && IsSpace(all[end - 1])) --end;
  if (end > begin) emitted_ = true;
  out.content.append(all, begin, end - begin);
  pending_ws_ = all.substr(end);
}

void ToolCallParser::Resolve(ToolCallDelta& out) {
  in_call_ = false;
  std::optional<std::vector<ToolCall>> calls = ParseRegion(format_, region_, tools_);
  if (calls && !calls->empty()) {
    num_calls_ += static_cast<int>(calls->size());
    for (ToolCall& c : *calls) out.calls.push_back(std::move(c));
    if (!skip_leading_ws_) separator_ = region_ws_;  // the first call of a run
    skip_leading_ws_ = true;
  } else {
    // Not a call after all: the text as the model wrote it, its end marker included.
    std::string raw = region_ws_ + marker_ + region_;
    if (!spec_->end.empty() && region_closed_) raw.append(spec_->end);
    EmitContent(out, raw);
  }
  marker_.clear();
  region_.clear();
  region_ws_.clear();
}

void ToolCallParser::Run(ToolCallDelta& out, bool finish) {
  while (!buf_.empty()) {
    if (in_call_) {
      if (spec_->end.empty()) {
        region_ += buf_;
        buf_.clear();
        return;
      }
      size_t at = buf_.find(spec_->end);
      // A hermes call is JSON: an end tag inside one of its strings (an argument's text) is part
      // of the call, as the grammar of an enforced call lets the model write it; so is one inside
      // a Qwen3-Coder parameter's raw value.
      auto inside_value = [&](size_t at) {
        const std::string so_far = region_ + buf_.substr(0, at);
        if (format_ == ToolCallFormat::kHermes) return InsideJsonString(so_far);
        if (format_ == ToolCallFormat::kQwen3Coder) return InsideOpenParameter(so_far);
        return false;
      };
      while (at != std::string::npos && inside_value(at)) at = buf_.find(spec_->end, at + 1);
      if (at == std::string::npos) {
        size_t keep = finish ? 0 : PartialSuffix(buf_, {spec_->end});
        region_.append(buf_, 0, buf_.size() - keep);
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      region_.append(buf_, 0, at);
      buf_.erase(0, at + spec_->end.size());
      region_closed_ = true;
      Resolve(out);
      region_closed_ = false;
      continue;
    }
    if (at_start_ && !spec_->anchored.empty()) {
      size_t ws = 0;
      while (ws < buf_.size() && IsSpace(buf_[ws])) ++ws;
      std::string_view rest = std::string_view(buf_).substr(ws);
      if (rest.empty() && !finish) return;
      bool maybe = false;
      for (std::string_view a : spec_->anchored) {
        if (rest.substr(0, a.size()) == a) {
          at_start_ = false;
          in_call_ = true;
          region_ws_ = buf_.substr(0, ws);
          buf_.erase(0, ws);  // the anchor stays: it is part of the call
          break;
        }
        maybe = maybe || a.substr(0, rest.size()) == rest;
      }
      if (in_call_) continue;
      if (maybe && !finish) return;
      at_start_ = false;
    }
    size_t best = std::string::npos;
    std::string_view marker;
    for (std::string_view m : spec_->markers) {
      size_t at = buf_.find(m);
      if (at < best) best = at, marker = m;
    }
    if (best != std::string::npos) {
      EmitContent(out, std::string_view(buf_).substr(0, best));
      region_ws_ = pending_ws_;
      pending_ws_.clear();
      marker_ = std::string(marker);
      buf_.erase(0, best + marker.size());
      in_call_ = true;
      at_start_ = false;
      continue;
    }
    size_t keep = finish ? 0 : PartialSuffix(buf_, spec_->markers);
    if (keep < buf_.size()) {
      at_start_ = false;
      EmitContent(out, std::string_view(buf_).substr(0, buf_.size() - keep));
    }
    buf_.erase(0, buf_.size() - keep);
    return;
  }
}

ToolCallDelta ParseToolCalls(ToolCallFormat format, std::string_view text,
                             const nlohmann::ordered_json* tools) {
  ToolCallParser p(format, tools);
  ToolCallDelta out = p.Feed(text);
  ToolCallDelta rest = p.Finish();
  out.content += rest.content;
  for (ToolCall& c : rest.calls) out.calls.push_back(std::move(c));
  return out;
}

}  // namespace tandem::chat_parse
