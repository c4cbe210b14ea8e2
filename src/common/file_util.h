// Small file helpers shared by the model and tokenizer loaders.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem {

// Whole file as bytes. NotFound if it does not exist; DataLoss if it cannot be read.
Result<std::string> ReadFile(const std::string& path);

// Parse a JSON file. NotFound if missing; InvalidArgument (naming the file and the parser's
// message) if it is not valid JSON.
Result<nlohmann::json> ReadJsonFile(const std::string& path);

// The model directory tandem uses when none is given (the unpacked bundled model).
std::string DefaultModelDir();

}  // namespace tandem
