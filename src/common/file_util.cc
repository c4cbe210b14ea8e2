#include "common/file_util.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tandem {

Result<std::string> ReadFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Err(StatusCode::kNotFound, "file not found: {}", path);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Err(StatusCode::kDataLoss, "cannot open {}", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Err(StatusCode::kDataLoss, "cannot read {}", path);
  return ss.str();
}

Result<nlohmann::json> ReadJsonFile(const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for a number no double holds (1e400), which escaped before.
    return Err(StatusCode::kInvalidArgument, "{} is not valid JSON: {}", path, e.what());
  }
}

std::string DefaultModelDir() {
  if (const char* dir = std::getenv("TANDEM_MODEL_DIR")) return dir;
  return TANDEM_DEFAULT_MODEL_DIR;
}

}  // namespace tandem
