// A value or an Error. C++20 has no std::expected; this is the small subset we need.
#pragma once

#include <stdexcept>
#include <type_traits>
#include <utility>
#include <variant>

#include "cgp/common/error.hpp"

namespace cgp {

// Thrown only when a caller reads the value of a failed result: a programming error, not an
// input error. Input errors are always returned as values.
class BadExpectedAccess : public std::logic_error {
 public:
  explicit BadExpectedAccess(const Error& error)
      : std::logic_error("value() of a failed result: " + error.to_string()) {}
};

template <class T>
class [[nodiscard]] Expected {
  static_assert(!std::is_same_v<T, Error>, "Expected<Error> is ambiguous");

 public:
  Expected(T value) : state_(std::in_place_index<0>, std::move(value)) {}      // NOLINT implicit
  Expected(Error error) : state_(std::in_place_index<1>, std::move(error)) {}  // NOLINT implicit

  bool has_value() const noexcept { return state_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  const T& value() const& {
    if (!has_value()) throw BadExpectedAccess(error());
    return std::get<0>(state_);
  }
  T& value() & {
    if (!has_value()) throw BadExpectedAccess(error());
    return std::get<0>(state_);
  }
  T&& value() && {
    if (!has_value()) throw BadExpectedAccess(error());
    return std::get<0>(std::move(state_));
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  // Precondition: !has_value(). Reading the error of a success is a programming error.
  const Error& error() const& {
    if (has_value()) throw std::logic_error("error() of a successful result");
    return std::get<1>(state_);
  }

 private:
  std::variant<T, Error> state_;
};

// For operations that return nothing but may fail.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)) {}  // NOLINT implicit

  bool ok() const noexcept { return error_.code == ErrorCode::ok; }
  explicit operator bool() const noexcept { return ok(); }
  const Error& error() const noexcept { return error_; }

 private:
  Error error_;
};

}  // namespace cgp

// Propagation in the style of absl's RETURN_IF_ERROR / ASSIGN_OR_RETURN: on failure the enclosing
// function returns the error (its return type is a Status or an Expected<U>; both are made from
// an Error).
//   CGP_RETURN_IF_ERROR(require_finite_positive("rho", rho));
//   CGP_ASSIGN_OR_RETURN(auto range, wire::region_from_wire(message.range()));
#define CGP_RETURN_IF_ERROR(expr)                                  \
  do {                                                             \
    if (auto cgp_status_or_value_ = (expr); !cgp_status_or_value_) \
      return cgp_status_or_value_.error();                         \
  } while (false)

#define CGP_DETAIL_CONCAT_INNER(a, b) a##b
#define CGP_DETAIL_CONCAT(a, b) CGP_DETAIL_CONCAT_INNER(a, b)
#define CGP_DETAIL_ASSIGN_OR_RETURN(result, lhs, expr) \
  auto result = (expr);                                \
  if (!result) return result.error();                  \
  lhs = std::move(*result)
#define CGP_ASSIGN_OR_RETURN(lhs, expr) \
  CGP_DETAIL_ASSIGN_OR_RETURN(CGP_DETAIL_CONCAT(cgp_result_, __LINE__), lhs, expr)
