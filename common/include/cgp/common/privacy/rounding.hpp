// Privacy arithmetic rounds against the attacker (DESIGN §6.3): a charge or an ε we report is
// rounded up, a capacity or budget we grant is rounded down.
//
// Every quantity in this module is a short chain (fewer than 16 steps) of IEEE-754 operations
// that are correctly rounded (+, −, ×, ÷, sqrt) or accurate to 1 ulp (glibc log, exp, log1p,
// erfc). Its relative error is therefore below 16·2⁻⁵², and padding by that much, then one more
// ulp, gives a bound that holds for the exact real-number formula.
#pragma once

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

namespace cgp::privacy {

inline constexpr double kPadRelative = 16 * DBL_EPSILON;

// The next double above x: std::nextafter(x, +inf) for every x (errno aside), inline and with
// selects instead of a library call (filters and mirrors step budgets per user and round).
// Positive doubles are ordered as their bit patterns, negative ones in reverse: one step of the
// pattern up or down, and ±0 to the least subnormal; NaN and +inf stay.
inline double next_up(double x) noexcept {
  const auto bits = std::bit_cast<std::uint64_t>(x);
  const std::uint64_t up = x > 0 && x < std::numeric_limits<double>::infinity() ? bits + 1
                           : x < 0                                              ? bits - 1
                           : x == 0                                             ? 1
                                                                                : bits;
  return std::bit_cast<double>(up);
}

// The next double below x: std::nextafter(x, −inf), as next_up.
inline double next_down(double x) noexcept {
  const auto bits = std::bit_cast<std::uint64_t>(x);
  const std::uint64_t down = x < 0 && x > -std::numeric_limits<double>::infinity() ? bits + 1
                             : x > 0                                               ? bits - 1
                             : x == 0 ? (std::uint64_t{1} << 63 | 1)
                                      : bits;
  return std::bit_cast<double>(down);
}

// A value ≥ the exact result x̂ whenever |x − x̂| ≤ kPadRelative·|x̂|.
inline double pad_up(double x) {
  return next_up(x + std::fabs(x) * kPadRelative);
}

// A value ≤ the exact result, never below zero when x ≥ 0 is a capacity.
inline double pad_down(double x) {
  double y =
      std::nextafter(x - std::fabs(x) * kPadRelative, -std::numeric_limits<double>::infinity());
  return (x >= 0 && y < 0) ? 0.0 : y;
}

// a − b rounded down, for a ≥ b ≥ 0 (a remaining budget): exact when a − b is representable,
// else the double just below. The subtraction's error is exact by Fast2Sum (|a| ≥ |b|).
inline double subtract_down(double a, double b) {
  double difference = a - b;
  double error = (a - difference) - b;  // exact: > 0 means difference < a − b, < 0 means above
  return error < 0 ? next_down(difference) : difference;
}

}  // namespace cgp::privacy
