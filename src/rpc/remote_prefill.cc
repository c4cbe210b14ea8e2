#include "rpc/remote_prefill.h"

#include <charconv>

namespace tandem::runtime {

namespace {

constexpr std::string_view kKvReady = "kv-ready ";

// Parses the decimal number before the next space of `s` into `out` and drops both; false if
// there is none (or it does not fit).
template <typename T>
bool TakeNumber(std::string_view* s, T* out) {
  const size_t space = s->find(' ');
  if (space == std::string_view::npos || space == 0) return false;
  const auto [end, ec] = std::from_chars(s->data(), s->data() + space, *out);
  if (ec != std::errc() || end != s->data() + space) return false;
  s->remove_prefix(space + 1);
  return true;
}

}  // namespace

std::string KvReadyNotification(const std::string& request_id, uint64_t call_id, int32_t first_token) {
  return std::string(kKvReady) + std::to_string(first_token) + " " + std::to_string(call_id) + " " + request_id;
}

std::optional<KvReady> ParseKvReadyNotification(std::string_view message) {
  if (!message.starts_with(kKvReady)) return std::nullopt;
  message.remove_prefix(kKvReady.size());
  KvReady r;
  if (!TakeNumber(&message, &r.first_token) || r.first_token < 0) return std::nullopt;
  if (!TakeNumber(&message, &r.call_id) || message.empty()) return std::nullopt;
  r.request_id = std::string(message);
  return r;
}

}  // namespace tandem::runtime
