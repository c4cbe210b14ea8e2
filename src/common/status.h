// Status and Result<T>: the error type at module boundaries (DESIGN.md section 6).
//
// Inside a module, exceptions are fine; a public function of a module returns Status or Result<T>.
// Expected "no room" conditions are std::optional, not errors.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace tandem {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller's input is wrong (bad JSON, bad option, prompt too long)
  kNotFound,            // a file, tensor, token or name does not exist
  kOutOfRange,          // an index or length beyond a limit (context length, vocab)
  kResourceExhausted,   // a pool or queue is full (KV blocks, waiting queue)
  kFailedPrecondition,  // the state does not allow this (e.g. model not loaded)
  kUnimplemented,       // a known feature tandem does not implement (e.g. a rope scaling type)
  kDataLoss,            // a file is truncated or corrupt
  kInternal,            // a bug
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: <message>"
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Helpers: Err(StatusCode::kNotFound, "no tensor {}", name)
template <typename... Args>
Status Err(StatusCode code, fmt::format_string<Args...> format, Args&&... args) {
  return Status(code, fmt::format(format, std::forward<Args>(args)...));
}

// Result<T>: a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "Result from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tandem

// Propagate a non-OK Status from an expression returning Status.
#define TANDEM_RETURN_IF_ERROR(expr)          \
  do {                                        \
    ::tandem::Status _st = (expr);            \
    if (!_st.ok()) return _st;                \
  } while (0)

#define TANDEM_CONCAT_INNER(a, b) a##b
#define TANDEM_CONCAT(a, b) TANDEM_CONCAT_INNER(a, b)
// TANDEM_ASSIGN_OR_RETURN(auto x, ExprReturningResult());
#define TANDEM_ASSIGN_OR_RETURN(lhs, expr) \
  TANDEM_ASSIGN_OR_RETURN_IMPL(TANDEM_CONCAT(_res_, __LINE__), lhs, expr)
#define TANDEM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
