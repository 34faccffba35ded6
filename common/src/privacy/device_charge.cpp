#include "cgp/common/privacy/device_charge.hpp"

#include <bit>
#include <cmath>
#include <cstdint>

#include "cgp/common/privacy/rounding.hpp"

namespace cgp::privacy {

double device_charge(double rho) noexcept {
  // (1 + 2^-10)² = 1 + 2^-9 + 2^-20: each product is exact (powers of two), two additions round.
  return pad_up(rho + rho * (2 * kGridSlack) + rho * (kGridSlack * kGridSlack));
}

double rho_within_charge(double charge) noexcept {
  const double start = charge / ((1 + kGridSlack) * (1 + kGridSlack));
  if (!(start > 0) || device_charge(start) <= charge) return start;
  // The largest ρ ≤ start that fits (or 0): device_charge is non-decreasing, and positive
  // doubles are ordered as their bit patterns, so bisect on the bits. device_charge pads by
  // about 17 ulps, so a step of a few dozen ulps brackets the answer at once.
  const auto fits = [&](std::uint64_t bits) {
    return bits == 0 || device_charge(std::bit_cast<double>(bits)) <= charge;
  };
  // Usually the answer is 2 to 5 ulps below start/(1 + kPadRelative), the inverse of the
  // padding (measured over 2·10^5 charges in [2^-30, 1]: 3 below in 72% of them): walk from
  // there to a fitting value whose successor does not fit — the answer, as device_charge is
  // non-decreasing — in two or three calls instead of a dozen (Alg. 3 converts every distinct
  // cap of every query). Values at or above start do not fit (checked above).
  const std::uint64_t start_bits = std::bit_cast<std::uint64_t>(start);
  std::uint64_t guess = std::bit_cast<std::uint64_t>(start / (1 + kPadRelative)) - 1;
  for (int step = 0; step < 8 && guess > 0 && guess < start_bits; ++step) {
    if (!fits(guess)) {
      --guess;
    } else if (!fits(guess + 1)) {
      return std::bit_cast<double>(guess);
    } else {
      ++guess;
    }
  }
  std::uint64_t too_large = std::bit_cast<std::uint64_t>(start), fitting = 0;
  for (std::uint64_t step = 32;; step *= 2) {
    const std::uint64_t candidate = too_large > step ? too_large - step : 0;
    if (fits(candidate)) {
      fitting = candidate;
      break;
    }
    too_large = candidate;
  }
  while (too_large - fitting > 1) {
    const std::uint64_t middle = fitting + (too_large - fitting) / 2;
    (fits(middle) ? fitting : too_large) = middle;
  }
  return std::bit_cast<double>(fitting);
}

double min_rho(double capacity) noexcept {
  return std::ldexp(capacity, -kMinRhoBits);
}

}  // namespace cgp::privacy
