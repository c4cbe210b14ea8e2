// Reasoning parsers: split a chat model's output text into its reasoning (the text between
// <think> and </think>) and its answer (the content), incrementally, for any split of the text
// into deltas (a tag may arrive cut in half across deltas). Names and formats follow vLLM's
// --reasoning-parser (docs.vllm.ai, "Reasoning Outputs"):
//   qwen3:       Qwen3 writes "<think>\n...\n</think>\n\n<answer>". Reasoning only when the output
//                starts with "<think>" (after whitespace); otherwise everything is content (as
//                with enable_thinking=false, whose prompt already holds an empty think block).
//   deepseek_r1: DeepSeek-R1 templates open "<think>\n" in the prompt, so the output starts in
//                reasoning (a leading "<think>" is dropped) and everything up to "</think>" is
//                reasoning; without "</think>" the whole output is reasoning.
//   none:        everything is content.
// With qwen3 and deepseek_r1 a tag that shows up later in the answer is dropped as well.
// Whitespace at the start and end of the reasoning and between "</think>" and the answer is
// dropped, so the tiny model's empty "<think>\n\n</think>\n\n" gives no reasoning at all. The tags
// never reach either output. Feeding the text in any number of pieces and then Finish() gives the
// same concatenated reasoning and content as Split() on the whole text.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tandem::chat_parse {

enum class ReasoningFormat { kNone, kQwen3, kDeepSeekR1 };

// "none", "qwen3", "deepseek_r1" (nullopt for anything else); and back.
std::optional<ReasoningFormat> ParseReasoningFormat(std::string_view name);
const char* ReasoningFormatName(ReasoningFormat format);
inline constexpr std::string_view kReasoningFormatNames = "qwen3, deepseek_r1, none";

// The parser a chat template calls for: deepseek_r1 when it opens the reasoning in the prompt
// ("<think>\n" after DeepSeek's assistant tag, or after Qwen3-Thinking-2507's
// '<|im_start|>assistant\n'), qwen3 when it otherwise knows "</think>" (Qwen3's
// templates strip and write think blocks), else none.
ReasoningFormat ReasoningFormatForTemplate(std::string_view template_source);

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  explicit ReasoningParser(ReasoningFormat format);

  // The part of the text so far that is certain; a possible partial tag or whitespace that may
  // turn out to be trimmed is held back until the next Feed or Finish.
  ReasoningDelta Feed(std::string_view text);
  // The end of the output: releases what was held back.
  ReasoningDelta Finish();

  // True while the output is inside the reasoning (the text fed so far opened it and has not
  // closed it): tokens that arrive then count as reasoning tokens.
  bool InReasoning() const { return state_ == State::kReasoning; }

  static ReasoningDelta Split(ReasoningFormat format, std::string_view text);

 private:
  enum class State { kStart, kReasoning, kAfterReasoning, kContent };
  void Run(ReasoningDelta& out, bool finish);

  ReasoningFormat format_;
  State state_ = State::kStart;
  std::string held_;        // bytes not yet decided
  std::string trailing_ws_;  // reasoning whitespace that is emitted only if more reasoning follows
  bool reasoning_started_ = false;  // a non-whitespace byte of reasoning was emitted
};

}  // namespace tandem::chat_parse
