#include "cgp/common/validate.hpp"

#include <charconv>
#include <cmath>
#include <string>

namespace cgp {

std::string format_number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  if (ec != std::errc()) return "?";
  return std::string(buffer, end);
}

std::string indexed_name(std::string_view name, std::size_t index) {
  // Appended piecewise: GCC 12 at -O3 warns falsely (-Wrestrict) on "[" + std::string.
  std::string out(name);
  out += '[';
  out += std::to_string(index);
  out += ']';
  return out;
}

Error make_error(ErrorCode code, std::string_view parameter, std::string_view message) {
  return Error{code, std::string(parameter), std::string(message)};
}

namespace {
Error value_error(ErrorCode code, std::string_view parameter, std::string_view rule, double value) {
  std::string message(parameter);
  message += " must be ";
  message += rule;
  message += ", got ";
  message += format_number(value);
  return make_error(code, parameter, message);
}
}  // namespace

Status require_finite_positive(std::string_view parameter, double value) {
  if (!std::isfinite(value))
    return value_error(ErrorCode::not_finite, parameter, "finite and positive", value);
  if (!(value > 0))
    return value_error(ErrorCode::not_positive, parameter, "finite and positive", value);
  return {};
}

Status require_finite(std::string_view parameter, double value) {
  if (!std::isfinite(value)) return value_error(ErrorCode::not_finite, parameter, "finite", value);
  return {};
}

Status require_all_finite(std::string_view parameter, std::span<const double> values) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      std::string name = indexed_name(parameter, i);
      return value_error(ErrorCode::not_finite, name, "finite", values[i]);
    }
  }
  return {};
}

Status require_open_interval(std::string_view parameter, double value, double lo, double hi) {
  std::string rule = "in (" + format_number(lo) + ", " + format_number(hi) + ")";
  if (!std::isfinite(value)) return value_error(ErrorCode::not_finite, parameter, rule, value);
  if (!(value > lo && value < hi))
    return value_error(ErrorCode::out_of_range, parameter, rule, value);
  return {};
}

Status require_count_in(std::string_view parameter, std::uint64_t value, std::uint64_t lo,
                        std::uint64_t hi) {
  if (value < lo || value > hi) {
    std::string message(parameter);
    message += " must be a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) +
               "], got " + std::to_string(value);
    return make_error(ErrorCode::out_of_range, parameter, message);
  }
  return {};
}

Status require_dimension(std::string_view parameter, std::span<const double> values,
                         std::size_t expected) {
  if (values.size() != expected) {
    std::string message(parameter);
    message += " must have dimension " + std::to_string(expected) + ", got " +
               std::to_string(values.size());
    return make_error(ErrorCode::dimension_mismatch, parameter, message);
  }
  return {};
}

}  // namespace cgp
