#include "runtime/remote_prefill.h"

#include <charconv>

namespace tandem::runtime {

namespace {
constexpr std::string_view kKvReady = "kv-ready ";
}  // namespace

std::string KvReadyNotification(const std::string& request_id, int32_t first_token) {
  return std::string(kKvReady) + std::to_string(first_token) + " " + request_id;
}

std::optional<KvReady> ParseKvReadyNotification(std::string_view message) {
  if (!message.starts_with(kKvReady)) return std::nullopt;
  message.remove_prefix(kKvReady.size());
  const size_t space = message.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 == message.size()) return std::nullopt;
  KvReady r;
  const auto [end, ec] = std::from_chars(message.data(), message.data() + space, r.first_token);
  if (ec != std::errc() || end != message.data() + space || r.first_token < 0) return std::nullopt;
  r.request_id = std::string(message.substr(space + 1));
  return r;
}

}  // namespace tandem::runtime
