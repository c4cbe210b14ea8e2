// Loading a Hugging Face model directory into what a worker serves: tokenizer, chat renderer and
// an Engine on the CPU runner or, in a build with CUDA, the CUDA runner.
#pragma once

#include <memory>
#include <string>

#include "chat/template.h"
#include "common/status.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace tandem::cli {

// Whether a bundle loads the model's chat template: kIfPresent logs a missing or unreadable one,
// kRequired fails on it, kSkip does not read it (`tandem generate` without --chat renders nothing).
enum class ChatTemplateUse { kSkip, kIfPresent, kRequired };

struct ModelBundle {
  std::string model_dir;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::shared_ptr<const ChatRenderer> renderer;  // null when the model has none, or kSkip
  std::unique_ptr<Engine> engine;
};

// The text side only (no weights; `engine` stays null): what a frontend needs.
// Errors: NotFound (no such directory or file) and the tokenizer's; a missing or unreadable chat
// template is an error only with kRequired (logged with kIfPresent).
Result<ModelBundle> LoadTextBundle(const std::string& model_dir, ChatTemplateUse chat_template);

// LoadTextBundle plus the weights and an Engine on the CPU runner (device_id -1) or the CUDA
// runner on GPU device_id (engine_options.h's ParseDevice). Errors: LoadTextBundle's,
// FailedPrecondition for a GPU in a build without CUDA, and whatever loading the weights or
// creating the engine reports.
Result<ModelBundle> LoadModelBundle(const std::string& model_dir, const EngineConfig& config,
                                    ChatTemplateUse chat_template, int device_id = -1);

}  // namespace tandem::cli
