#include "chat_parse/reasoning.h"

#include <algorithm>

namespace tandem::chat_parse {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t SkipSpace(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && IsSpace(s[i])) ++i;
  return i;
}

// The length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t PartialTagSuffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

bool IsPartialTag(std::string_view s) {
  return (s.size() < kOpen.size() && kOpen.substr(0, s.size()) == s) ||
         (s.size() < kClose.size() && kClose.substr(0, s.size()) == s);
}

// The longest suffix of `s` (which holds no whole tag) that later text could still turn into a
// tag once the tags it completes are dropped: a run of partial tags, e.g. "<t<" (the "<" may
// become "<think>", whose removal leaves "<t" before what follows).
size_t JoinableSuffix(std::string_view s) {
  size_t from = s.size(), end = s.size();
  while (end > 0) {
    const size_t lt = s.rfind('<', end - 1);
    if (lt == std::string_view::npos || !IsPartialTag(s.substr(lt, end - lt))) break;
    from = end = lt;
  }
  return s.size() - from;
}

}  // namespace

std::optional<ReasoningFormat> ParseReasoningFormat(std::string_view name) {
  if (name == "none") return ReasoningFormat::kNone;
  if (name == "qwen3") return ReasoningFormat::kQwen3;
  if (name == "deepseek_r1") return ReasoningFormat::kDeepSeekR1;
  return std::nullopt;
}

const char* ReasoningFormatName(ReasoningFormat format) {
  switch (format) {
    case ReasoningFormat::kQwen3: return "qwen3";
    case ReasoningFormat::kDeepSeekR1: return "deepseek_r1";
    case ReasoningFormat::kNone: break;
  }
  return "none";
}

ReasoningFormat ReasoningFormatForTemplate(std::string_view source) {
  // Qwen3 thinking-only models (2507) open the think block in the generation prompt.
  if (source.find("'<|im_start|>assistant\\n<think>\\n'") != std::string_view::npos)
    return ReasoningFormat::kDeepSeekR1;
  if (source.find("<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C><think>") != std::string_view::npos)
    return ReasoningFormat::kDeepSeekR1;  // "<｜Assistant｜><think>"
  if (source.find("</think>") != std::string_view::npos) return ReasoningFormat::kQwen3;
  return ReasoningFormat::kNone;
}

ReasoningParser::ReasoningParser(ReasoningFormat format) : format_(format) {
  if (format == ReasoningFormat::kNone) state_ = State::kContent;
}

ReasoningDelta ReasoningParser::Feed(std::string_view text) {
  held_.append(text);
  ReasoningDelta out;
  Run(out, false);
  return out;
}

ReasoningDelta ReasoningParser::Finish() {
  ReasoningDelta out;
  Run(out, true);
  trailing_ws_.clear();  // whitespace at the end of the reasoning is dropped
  return out;
}

ReasoningDelta ReasoningParser::Split(ReasoningFormat format, std::string_view text) {
  ReasoningParser p(format);
  ReasoningDelta out = p.Feed(text);
  ReasoningDelta rest = p.Finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  return out;
}

void ReasoningParser::Run(ReasoningDelta& out, bool finish) {
  // Emits reasoning text: leading whitespace dropped, trailing whitespace held in trailing_ws_.
  auto emit_reasoning = [&](std::string_view text) {
    std::string all = trailing_ws_;
    all.append(text);
    trailing_ws_.clear();
    size_t begin = reasoning_started_ ? 0 : SkipSpace(all);
    size_t end = all.size();
    while (end > begin && IsSpace(all[end - 1])) --end;
    if (end > begin) {
      out.reasoning.append(all, begin, end - begin);
      reasoning_started_ = true;
      trailing_ws_ = all.substr(end);
    } else if (reasoning_started_) {
      trailing_ws_ = all.substr(begin);
    }
  };
  while (true) {
    switch (state_) {
      case State::kStart: {
        std::string_view rest = std::string_view(held_).substr(SkipSpace(held_));
        if (rest.substr(0, kOpen.size()) == kOpen) {
          held_.erase(0, held_.size() - rest.size() + kOpen.size());
          state_ = State::kReasoning;
          continue;
        }
        if (!finish && kOpen.substr(0, rest.size()) == rest) return;  // maybe "<think>" to come
        state_ = format_ == ReasoningFormat::kDeepSeekR1 ? State::kReasoning : State::kContent;
        continue;
      }
      case State::kReasoning: {
        size_t at = held_.find(kClose);
        if (at != std::string::npos) {
          emit_reasoning(std::string_view(held_).substr(0, at));
          trailing_ws_.clear();
          held_.erase(0, at + kClose.size());
          state_ = State::kAfterReasoning;
          continue;
        }
        size_t keep = finish ? 0 : PartialTagSuffix(held_, kClose);
        emit_reasoning(std::string_view(held_).substr(0, held_.size() - keep));
        held_.erase(0, held_.size() - keep);
        return;
      }
      case State::kAfterReasoning: {
        size_t n = SkipSpace(held_);
        held_.erase(0, n);
        if (held_.empty()) return;
        state_ = State::kContent;
        continue;
      }
      case State::kContent: {
        if (format_ == ReasoningFormat::kNone) {
          out.content += held_;
          held_.clear();
          return;
        }
        // A stray tag later in the answer is dropped too: no tag ever reaches the content. The
        // text around it is searched again, since "<t" + "<think>" + "hink>" joins into a tag.
        size_t open = held_.find(kOpen), close = held_.find(kClose);
        size_t at = std::min(open, close);
        if (at != std::string::npos) {
          held_.erase(at, at == open ? kOpen.size() : kClose.size());
          continue;
        }
        size_t keep = finish ? 0 : JoinableSuffix(held_);
        out.content.append(held_, 0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return;
      }
    }
  }
}

}  // namespace tandem::chat_parse
