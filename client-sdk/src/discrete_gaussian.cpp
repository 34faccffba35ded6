#include "discrete_gaussian.hpp"

#include <bit>
#include <boost/multiprecision/cpp_int.hpp>
#include <cmath>
#include <string>
#include <utility>

#include "cgp/common/validate.hpp"

namespace cgp::client {
namespace {

using u128 = uint128;
// Slow path for events too rare to matter in time but needed for exactness (an acceptance
// exponent beyond 128 bits happens with probability below e^-16000 per sample).
using U512 = boost::multiprecision::uint512_t;

U512 uniform_below(RandomBits& bits, const U512& bound) {
  if (bound <= 1) return 0;
  const unsigned top = boost::multiprecision::msb(U512(bound - 1));  // highest set bit
  const unsigned words = top / 64 + 1;
  const std::uint64_t top_mask = ~std::uint64_t{0} >> (63 - top % 64);
  for (;;) {
    U512 x = bits.next() & top_mask;
    for (unsigned w = 1; w < words; ++w) x = (x << 64) | U512(bits.next());
    if (x < bound) return x;
  }
}

// CKS Algorithm 1 for γ = n/d ∈ [0, 1]: K ← 1; while Bernoulli(γ/K): K ← K + 1; return K odd.
bool bernoulli_exp_unit_big(const U512& n, const U512& d, U512 k, RandomBits& bits) {
  while (uniform_below(bits, d * k) < n) ++k;
  return static_cast<bool>(k & 1);
}

bool bernoulli_exp_unit(u128 n, u128 d, RandomBits& bits) {
  u128 k = 1;
  for (;;) {
    u128 dk;
    if (multiply_overflows(d, k, dk))
      return bernoulli_exp_unit_big(U512(n), U512(d), U512(k), bits);
    if (uniform_below(bits, dk) >= n) break;
    ++k;
  }
  return static_cast<bool>(k & 1);
}

bool bernoulli_exp_minus_one(RandomBits& bits) {
  return bernoulli_exp_unit(1, 1, bits);
}

bool bernoulli_exp_big(U512 n, const U512& d, RandomBits& bits) {
  while (n > d) {
    if (!bernoulli_exp_minus_one(bits)) return false;
    n -= d;
  }
  return bernoulli_exp_unit_big(n, d, 1, bits);
}

std::uint64_t floor_sqrt(std::uint64_t x) {
  auto r = static_cast<std::uint64_t>(std::sqrt(static_cast<double>(x)));
  while (static_cast<u128>(r) * r > x) --r;
  while (static_cast<u128>(r + 1) * (r + 1) <= x) ++r;
  return r;
}

}  // namespace

uint128 uniform_below(RandomBits& bits, uint128 bound) {
  if (high64(bound) == 0) return bits.uniform_below(low64(bound));
  // bound > 2^64: draw 64 + bitlength(high) bits, reject values ≥ bound (accepts > 1/2). For
  // bound = 2^64 exactly no high bit is drawn (a shift by 64 would be undefined: on arm64 it
  // kept every bit and the loop almost never accepted).
  const std::uint64_t high_limit = high64(bound - 1);
  const std::uint64_t high_mask =
      high_limit == 0 ? 0 : ~std::uint64_t{0} >> std::countl_zero(high_limit);
  for (;;) {
    const std::uint64_t high = bits.next() & high_mask;
    uint128 x = make_uint128(high, bits.next());
    if (x < bound) return x;
  }
}

bool bernoulli_exp(u128 n, u128 d, RandomBits& bits) {
  // γ > 1: ⌊γ⌋ independent Bernoulli(e^−1) successes, then Bernoulli(exp(−(γ − ⌊γ⌋))).
  while (n > d) {
    if (!bernoulli_exp_minus_one(bits)) return false;
    n -= d;
  }
  return bernoulli_exp_unit(n, d, bits);
}

Expected<DiscreteGaussian> DiscreteGaussian::create(std::uint64_t sigma2) {
  if (sigma2 < 1 || sigma2 > kMaxSigma2) {
    return make_error(ErrorCode::out_of_range, "sigma2",
                      "sigma2 must be in [1, 2^62], got " + std::to_string(sigma2));
  }
  return DiscreteGaussian(sigma2, floor_sqrt(sigma2) + 1);
}

DiscreteGaussian::DiscreteGaussian(std::uint64_t sigma2, std::uint64_t t) noexcept
    : sigma2_(sigma2), t_(t), denominator_(2 * static_cast<u128>(sigma2) * t * t) {}

namespace {
// CKS Algorithm 2 with s = 1, drawn until it is not "−0": the sign and |y| of a discrete
// Laplace sample with scale t, P[y] ∝ exp(−|y|/t).
std::pair<bool, u128> discrete_laplace_parts(std::uint64_t t, RandomBits& bits) {
  for (;;) {
    const bool negative = bits.bit();
    std::uint64_t u;
    do {
      u = bits.uniform_below(t);
    } while (!bernoulli_exp(u, t, bits));
    // v counts Bernoulli(e^-1) successes: beyond 2^64 with probability e^-(2^64).
    std::uint64_t v = 0;
    while (bernoulli_exp_minus_one(bits)) ++v;
    const u128 magnitude = static_cast<u128>(v) * t + u;
    if (negative && magnitude == 0) continue;
    return {negative, magnitude};
  }
}
}  // namespace

int128 sample_discrete_laplace(std::uint64_t t, RandomBits& bits) {
  const auto [negative, magnitude] = discrete_laplace_parts(t, bits);
  // magnitude < 2^64·t: for t < 2^63 it fits a signed 128-bit value.
  const auto y = static_cast<int128>(magnitude);
  return negative ? -y : y;
}

int128 DiscreteGaussian::sample(RandomBits& bits) const {
  for (;;) {
    // CKS Algorithm 2: discrete Laplace with scale t, P[y] ∝ exp(−|y|/t).
    const auto [negative, magnitude] = discrete_laplace_parts(t_, bits);

    // CKS Algorithm 3: accept with probability exp(−(|y| − σ²/t)²/(2σ²))
    //                                        = exp(−(|y|t − σ²)²/(2σ²t²)).
    const u128 scaled = magnitude * t_;  // < 2^64·2^32: no overflow for σ² ≤ 2^62
    const u128 gap = scaled >= sigma2_ ? scaled - sigma2_ : sigma2_ - scaled;
    bool accept;
    if ((gap >> 64) == 0) {
      accept = bernoulli_exp(gap * gap, denominator_, bits);
    } else {
      U512 big_gap(gap);
      accept = bernoulli_exp_big(big_gap * big_gap, U512(denominator_), bits);
    }
    if (!accept) continue;
    // magnitude < 2^96 (v counts Bernoulli successes, t < 2^32), so the sign fits.
    const auto y = static_cast<int128>(magnitude);
    return negative ? -y : y;
  }
}

}  // namespace cgp::client
