#include "frontend/errors.h"

#include <nlohmann/json.hpp>

namespace tandem::http {

std::string OpenAIErrorBody(std::string_view message, std::string_view type,
                            std::string_view param, std::string_view code) {
  nlohmann::json error = {
      {"message", std::string(message)},
      {"type", std::string(type)},
      {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(std::string(param))},
      {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(std::string(code))},
  };
  nlohmann::json body = {{"error", std::move(error)}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace tandem::http
