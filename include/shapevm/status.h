// SPDX-License-Identifier: Apache-2.0
// Status and Expected<T>: how every ShapeVM layer reports failure (no exceptions, no abort()
// in library code). A Status is an ErrorCode from errors.def plus a message that names what,
// where and the shapes involved; success carries no allocation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace shapevm {

enum class ErrorCode : std::uint8_t {
#define SVM_ERROR(name, meaning) name,
#include "shapevm/errors.def"
#undef SVM_ERROR
};

// The error code's name ("ShapeMismatch") and its one-line meaning from errors.def.
std::string_view errorCodeName(ErrorCode code);
std::string_view errorCodeMeaning(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message)
      : state_(std::make_unique<State>(State{code, std::move(message)})) {}

  static Status ok() { return Status(); }
  bool isOk() const { return state_ == nullptr; }
  explicit operator bool() const { return isOk(); }
  ErrorCode code() const { return state_ ? state_->code : ErrorCode::Ok; }
  const std::string& message() const;
  // "ShapeMismatch: add: cannot broadcast [2,3] with [4]".
  std::string toString() const;

  // Prefixes context ("in function f at PC 0x0A (line 3)") to the message; no-op on success.
  Status& withContext(std::string_view context);

  Status(const Status& other) : state_(other.state_ ? std::make_unique<State>(*other.state_) : nullptr) {}
  Status& operator=(const Status& other) {
    if (this != &other) state_ = other.state_ ? std::make_unique<State>(*other.state_) : nullptr;
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

 private:
  struct State {
    ErrorCode code;
    std::string message;
  };
  std::unique_ptr<State> state_;
};

template <typename... Args>
Status makeError(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  return Status(code, fmt::format(format, std::forward<Args>(args)...));
}

// A value or an error Status.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : storage_(std::in_place_index<0>, std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Expected(Status status) : storage_(std::in_place_index<1>, std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool hasValue() const { return storage_.index() == 0; }
  explicit operator bool() const { return hasValue(); }
  T& value() & { return std::get<0>(storage_); }
  const T& value() const& { return std::get<0>(storage_); }
  T&& value() && { return std::get<0>(std::move(storage_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Status& status() const& { return std::get<1>(storage_); }
  Status&& status() && { return std::get<1>(std::move(storage_)); }
  Status takeStatus() { return hasValue() ? Status() : std::move(std::get<1>(storage_)); }

 private:
  std::variant<T, Status> storage_;
};

}  // namespace shapevm

#define SVM_CONCAT_INNER(a, b) a##b
#define SVM_CONCAT(a, b) SVM_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` fails.
#define SVM_RETURN_IF_ERROR(expr)                          \
  do {                                                     \
    ::shapevm::Status svm_status_ = (expr);                \
    if (!svm_status_.isOk()) return svm_status_;           \
  } while (0)

// `SVM_ASSIGN_OR_RETURN(auto x, makeX());` unwraps an Expected or returns its Status.
#define SVM_ASSIGN_OR_RETURN(lhs, expr) SVM_ASSIGN_OR_RETURN_IMPL(SVM_CONCAT(svm_expected_, __LINE__), lhs, expr)
#define SVM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.hasValue()) return std::move(tmp).status(); \
  lhs = std::move(tmp).value()
