// Loading a Hugging Face model directory into what a worker serves: tokenizer, chat renderer and
// an Engine on the CPU runner.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "engine/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tandem::cli {

struct ModelBundle {
  std::string model_dir;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::shared_ptr<const ChatRenderer> renderer;  // null when the model has no chat template
  std::unique_ptr<Engine> engine;
};

// Errors: NotFound (no such directory or file), and whatever loading the tokenizer, the weights or
// creating the engine reports. A missing or unreadable chat template is not an error (logged).
Result<ModelBundle> LoadModelBundle(const std::string& model_dir, const EngineConfig& config,
                                    bool need_chat_template);

}  // namespace tandem::cli
