// Status and StatusOr: the error type propagated through every layer of sluice.
// Errors are converted to HTTP/gRPC/CLI errors at exactly one boundary each.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace sluice {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad user input (request field, CLI flag, input file line)
  kNotFound,            // missing file, tensor, model, route
  kFailedPrecondition,  // model directory/config inconsistent with what is asked
  kOutOfRange,          // input longer than a limit
  kResourceExhausted,   // queue full, memory limit
  kUnavailable,         // loading or draining
  kUnsupported,         // a known format/feature that sluice refuses (e.g. pickle)
  kInternal,            // a bug: invariant broken
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
  std::string ToString() const;

  // Returns a copy with `context + ": "` prepended to the message.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status InvalidArgument(std::string message);
Status NotFound(std::string message);
Status FailedPrecondition(std::string message);
Status OutOfRange(std::string message);
Status Unsupported(std::string message);
Status Internal(std::string message);

// Holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design
  StatusOr(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace sluice

#define SLUICE_CONCAT_INNER(a, b) a##b
#define SLUICE_CONCAT(a, b) SLUICE_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::sluice::Status _sluice_status = (expr);        \
    if (!_sluice_status.ok()) return _sluice_status; \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(SLUICE_CONCAT(_sluice_statusor_, __LINE__), lhs, expr)
