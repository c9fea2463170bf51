#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ckptdb {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kCorruption,
  kIOError,
  kFailedPrecondition,
  kAlreadyExists,
  kInternal,
};

// Name of a code, e.g. "InvalidArgument".
std::string_view StatusCodeName(StatusCode code);

// The outcome of an operation: OK, or a code with a message that names what the
// caller can fix (the key, the rank, the shapes, the path). Value type; cheap
// to copy when OK.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return Status(StatusCode::kInvalidArgument, std::move(msg));
  }
  static Status NotFound(std::string msg) {
    return Status(StatusCode::kNotFound, std::move(msg));
  }
  static Status Corruption(std::string msg) {
    return Status(StatusCode::kCorruption, std::move(msg));
  }
  static Status IOError(std::string msg) {
    return Status(StatusCode::kIOError, std::move(msg));
  }
  static Status FailedPrecondition(std::string msg) {
    return Status(StatusCode::kFailedPrecondition, std::move(msg));
  }
  static Status AlreadyExists(std::string msg) {
    return Status(StatusCode::kAlreadyExists, std::move(msg));
  }
  static Status Internal(std::string msg) {
    return Status(StatusCode::kInternal, std::move(msg));
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  bool IsInvalidArgument() const {
    return code_ == StatusCode::kInvalidArgument;
  }
  bool IsNotFound() const { return code_ == StatusCode::kNotFound; }
  bool IsCorruption() const { return code_ == StatusCode::kCorruption; }
  bool IsIOError() const { return code_ == StatusCode::kIOError; }

  // "InvalidArgument: message" or "OK".
  std::string ToString() const;

  // Returns a copy whose message is prefixed by `context` + ": ".
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

namespace internal {
// Prints "ckptdb: <kind> failed at <file>:<line>: <condition>[: <detail>]" to
// stderr and aborts.
[[noreturn]] void CheckFailed(const char* kind, const char* file, int line,
                              const char* condition, const std::string& detail);
inline std::string CheckDetail() { return std::string(); }
inline std::string CheckDetail(std::string detail) { return detail; }
}  // namespace internal

}  // namespace ckptdb

// Checks that hold in every build type (Release included) and say whose
// mistake a failure is, as KJ_ASSERT and KJ_REQUIRE do. A mistake of a library
// user is never one of these: it is a Status.
//
// CKPTDB_ASSERT(condition[, detail]): an invariant of ckptdb's own code; false
// is a bug in ckptdb.
#define CKPTDB_ASSERT(condition, ...)                          \
  CKPTDB_CHECK_IMPL("internal check", (condition), #condition, \
                    ::ckptdb::internal::CheckDetail(__VA_ARGS__))

// CKPTDB_REQUIRE(condition[, detail]): a precondition of a function; false is
// a bug in the code that called it.
#define CKPTDB_REQUIRE(condition, ...)                       \
  CKPTDB_CHECK_IMPL("precondition", (condition), #condition, \
                    ::ckptdb::internal::CheckDetail(__VA_ARGS__))

// Both checks: `detail` is evaluated only when `condition` is false.
#define CKPTDB_CHECK_IMPL(kind, condition, text, detail)                       \
  do {                                                                         \
    if (!(condition)) [[unlikely]]                                             \
      ::ckptdb::internal::CheckFailed(kind, __FILE__, __LINE__, text, detail); \
  } while (0)

namespace ckptdb {

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  // An OK status without a value is itself an error (Internal).
  Result(Status status)
      : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok())
      status_ = Status::Internal("Result built from OK status without value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // The value. Requires ok(): the value of an error aborts, naming the error.
  T& value() & { return Checked(), *value_; }
  const T& value() const& { return Checked(), *value_; }
  T&& value() && { return Checked(), std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void Checked() const {
    CKPTDB_REQUIRE(ok(), "the value of an error Result: " + status_.ToString());
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace ckptdb

#define CKPTDB_CONCAT_IMPL(a, b) a##b
#define CKPTDB_CONCAT(a, b) CKPTDB_CONCAT_IMPL(a, b)

// Returns from the enclosing function when `expr` (a Status) is not OK.
#define CKPTDB_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::ckptdb::Status _ckptdb_status = (expr);        \
    if (!_ckptdb_status.ok()) return _ckptdb_status; \
  } while (0)

#define CKPTDB_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

// `CKPTDB_ASSIGN_OR_RETURN(auto x, F())`: binds the value of a Result or
// returns its Status.
#define CKPTDB_ASSIGN_OR_RETURN(lhs, expr)                                    \
  CKPTDB_ASSIGN_OR_RETURN_IMPL(CKPTDB_CONCAT(_ckptdb_result_, __LINE__), lhs, \
                               expr)
