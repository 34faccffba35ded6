// ExactSum (coordinator/exact_sum.hpp) on its own: Python's math.fsum examples, cancellation,
// overflow, non-finite values, and random values over the whole exponent range against two
// references (a big integer rounded bit by bit, and fsum's own algorithm) — the same double for
// every order and every split merged through partials().
#include <algorithm>
#include <array>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "cgp/coordinator/exact_sum.hpp"
#include "support/seed.hpp"

using namespace cgp::coordinator;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMax = std::numeric_limits<double>::max();

// The reference: the exact sum as a two's-complement integer of 2^-1074 units (every double is
// one below 2^2098; 34 limbs hold 2^78 of them), rounded to nearest, ties to even, by hand.
class BigSum {
 public:
  void add(double x) {
    const auto bits = std::bit_cast<std::uint64_t>(x);
    const int field = static_cast<int>(bits >> 52 & 0x7ff);
    std::uint64_t m = bits & ((std::uint64_t{1} << 52) - 1);
    if (field != 0) m |= std::uint64_t{1} << 52;
    const int shift = std::max(field, 1) - 1;  // x = ±m·2^shift units
    Limbs term{};
    term[static_cast<std::size_t>(shift / 64)] = m << (shift % 64);
    if (shift % 64 != 0) term[static_cast<std::size_t>(shift / 64 + 1)] = m >> (64 - shift % 64);
    if (bits >> 63) negate(term);
    unsigned carry = 0;
    for (std::size_t i = 0; i < kLimbs; ++i) {
      const std::uint64_t a = limb_[i], s = a + term[i] + carry;
      carry = (s < a || (carry && s == a)) ? 1 : 0;
      limb_[i] = s;
    }
  }

  double value() const {
    Limbs a = limb_;
    const bool negative = a[kLimbs - 1] >> 63;
    if (negative) negate(a);
    int top = -1;  // highest set bit
    for (int i = static_cast<int>(kLimbs) * 64 - 1; i >= 0 && top < 0; --i)
      if (bit(a, i)) top = i;
    if (top < 0) return 0.0;
    double magnitude;
    if (top <= 52) {  // below 2^-1021: a multiple of 2^-1074 that fits, exact
      magnitude = std::ldexp(static_cast<double>(a[0]), -1074);
    } else {
      std::uint64_t mantissa = 0;
      for (int i = top; i >= top - 52; --i) mantissa = mantissa << 1 | (bit(a, i) ? 1 : 0);
      const bool half = bit(a, top - 53);
      bool sticky = false;
      for (int i = top - 54; i >= 0 && !sticky; --i) sticky = bit(a, i);
      if (half && (sticky || (mantissa & 1))) ++mantissa;
      magnitude = std::ldexp(static_cast<double>(mantissa), top - 52 - 1074);
    }
    return negative ? -magnitude : magnitude;
  }

 private:
  static constexpr std::size_t kLimbs = 34;
  using Limbs = std::array<std::uint64_t, kLimbs>;
  static bool bit(const Limbs& a, int i) {
    return i >= 0 && (a[static_cast<std::size_t>(i / 64)] >> (i % 64) & 1);
  }
  static void negate(Limbs& a) {
    unsigned carry = 1;
    for (auto& limb : a) {
      limb = ~limb + carry;
      carry = (carry && limb == 0) ? 1 : 0;
    }
  }
  Limbs limb_{};
};

// The second reference: Python's math.fsum (CPython Modules/mathmodule.c), finite values whose
// running sums stay in range — Shewchuk's Grow-Expansion, then the same rounding.
double python_fsum(const std::vector<double>& values) {
  std::vector<double> p;
  for (double x : values) {
    std::size_t kept = 0;
    for (double y : p) {
      if (std::fabs(x) < std::fabs(y)) std::swap(x, y);
      const double hi = x + y, lo = y - (hi - x);
      if (lo != 0) p[kept++] = lo;
      x = hi;
    }
    p.resize(kept);
    if (x != 0) p.push_back(x);
  }
  std::size_t n = p.size();
  if (n == 0) return 0.0;
  double hi = p[--n], lo = 0;
  while (n > 0) {
    const double x = hi, y = p[--n];
    hi = x + y;
    lo = y - (hi - x);
    if (lo != 0) break;
  }
  if (n > 0 && ((lo < 0 && p[n - 1] < 0) || (lo > 0 && p[n - 1] > 0))) {
    const double y = lo * 2, x = hi + y;
    if (x - hi == y) hi = x;
  }
  return hi;
}

double exact_sum(const std::vector<double>& values) {
  ExactSum sum;
  for (double v : values) sum.add(v);
  return sum.value();
}

double reference_sum(const std::vector<double>& values) {
  BigSum sum;
  for (double v : values) sum.add(v);
  return sum.value();
}

// The same double, zeros' signs included.
bool same(double a, double b) {
  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

// Bits [low, high] a finite non-zero double spans, as exponents of 2.
std::pair<int, int> bit_span(double x) {
  const auto bits = std::bit_cast<std::uint64_t>(x);
  const int field = static_cast<int>(bits >> 52 & 0x7ff);
  std::uint64_t m = bits & ((std::uint64_t{1} << 52) - 1);
  if (field != 0) m |= std::uint64_t{1} << 52;
  const int unit = std::max(field, 1) - 1075;  // the exponent of m's bit 0
  return {unit + std::countr_zero(m), unit + 63 - std::countl_zero(m)};
}

// Random doubles of either sign over exponents [-1074, max_exponent], subnormals included.
std::vector<double> wide_values(std::mt19937_64& rng, std::size_t n, int max_exponent) {
  std::uniform_int_distribution<int> exponent(-1074, max_exponent);
  std::vector<double> out;
  for (std::size_t i = 0; i < n; ++i) {
    const double m = static_cast<double>(rng() >> 11 | std::uint64_t{1} << 52);  // 53 bits
    const double x = std::ldexp(m, exponent(rng) - 52);
    out.push_back(rng() & 1 ? -x : x);
  }
  return out;
}

// Values that nearly cancel: each of `base` with its negation, a neighbour or a multiple.
std::vector<double> cancelling_values(std::mt19937_64& rng, std::vector<double> base) {
  const std::size_t n = base.size();
  for (std::size_t i = 0; i < n; ++i) {
    const double x = base[i];
    switch (rng() % 4) {
      case 0:
        base.push_back(-x);
        break;
      case 1:
        base.push_back(-std::nextafter(x, 0.0));
        break;
      case 2:
        base.push_back(-x / 2), base.push_back(-x / 2);
        break;
      default:
        base.push_back(-std::nextafter(x, x > 0 ? kInf : -kInf));
        break;
    }
  }
  return base;
}

}  // namespace

TEST_CASE("ExactSum gives Python's math.fsum results", "[coordinator][exact_sum]") {
  // CPython Lib/test/test_math.py, testFsum.
  const std::vector<std::pair<std::vector<double>, double>> cases = {
      {{}, 0.0},
      {{0.0}, 0.0},
      {{1e100, 1.0, -1e100, 1e-100, 1e50, -1.0, -1e50}, 1e-100},
      {{0x1p53, -0.5, -0x1p-54}, 0x1p53 - 1.0},
      {{0x1p53, 1.0, 0x1p-100}, 0x1p53 + 2.0},
      {{0x1p53 + 10.0, 1.0, 0x1p-100}, 0x1p53 + 12.0},
      {{0x1p53 - 4.0, 0.5, 0x1p-54}, 0x1p53 - 3.0},
      {{1e16, 1., 1e-16}, 10000000000000002.0},
      {{1e16 - 2., 1. - 0x1p-53, -(1e16 - 2.), -(1. - 0x1p-53)}, 0.0},
  };
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const auto& [values, expected] = cases[c];
    INFO("case " << c);
    CHECK(same(exact_sum(values), expected));
    CHECK(same(reference_sum(values), expected));
    CHECK(same(python_fsum(values), expected));
  }
  std::vector<double> harmonic, alternating;
  for (int n = 1; n <= 1000; ++n) {
    harmonic.push_back(1. / n);
    alternating.push_back((n % 2 ? -1. : 1.) / n);
  }
  CHECK(same(exact_sum(harmonic), 0x1.df11f45f4e61ap+2));
  CHECK(same(exact_sum(alternating), -0x1.62a2af1bd3624p-1));
  // Many partials at once (fsum's resizing case).
  std::vector<double> spread;
  for (int n = -1074; n < 972; n += 2)
    spread.push_back(std::ldexp(1, n) - std::ldexp(1, n + 50) + std::ldexp(1, n + 52));
  spread.push_back(-0x1p1022);
  CHECK(same(exact_sum(spread), 0x1.5555555555555p+970));
  CHECK(same(reference_sum(spread), 0x1.5555555555555p+970));
}

TEST_CASE("ExactSum cancels exactly and rounds once, ties to even", "[coordinator][exact_sum]") {
  CHECK(exact_sum({1e100, 1, -1e100}) == 1);
  CHECK(exact_sum({1e308, 1e-308, -1e308}) == 1e-308);
  CHECK(exact_sum({kMax, -kMax, 0x1p-1074}) == 0x1p-1074);
  CHECK(exact_sum({0.1, 0.2, -0.3}) == reference_sum({0.1, 0.2, -0.3}));
  CHECK(exact_sum({0.1, 0.2, -0.3}) != (0.1 + 0.2) - 0.3);
  // 1 + 2^-53 is a tie (to 1, even); anything beyond it in the same direction rounds up.
  CHECK(exact_sum({1, 0x1p-53}) == 1);
  CHECK(exact_sum({1, 0x1p-53, 0x1p-1074}) == 1 + 0x1p-52);
  CHECK(exact_sum({0x1p-1074, 0x1p-53, 1}) == 1 + 0x1p-52);
  CHECK(exact_sum({1 + 0x1p-52, 0x1p-53, -0x1p-1074}) == 1 + 0x1p-52);
  CHECK(exact_sum({1 + 0x1p-52, 0x1p-53}) == 1 + 0x1p-51);  // odd: the tie goes up
  // A zero sum is +0.0, whatever the zeros' signs.
  CHECK(same(exact_sum({-0.0}), 0.0));
  CHECK(same(exact_sum({-1.5, 1.5}), 0.0));
  CHECK(same(ExactSum{}.value(), 0.0));
}

TEST_CASE("ExactSum never overflows on the way, and past the largest double it is inf",
          "[coordinator][exact_sum]") {
  // fsum raises OverflowError on the first two: their running sums leave the range.
  CHECK(exact_sum({kMax, kMax, -kMax}) == kMax);
  CHECK(exact_sum({-kMax, -kMax, kMax, 1}) == -kMax);
  CHECK(exact_sum({0x1p1022, 0x1.fffffffffffffp1021, -0x1p1022}) == 0x1.fffffffffffffp1021);
  // kMax + 2^970 is the tie between kMax and 2^1024: to even, which is 2^1024, that is inf.
  CHECK(exact_sum({kMax, 0x1p970}) == kInf);
  CHECK(exact_sum({kMax, 0x1p970, -0x1p-1074}) == kMax);
  CHECK(exact_sum({-kMax, -0x1p970}) == -kInf);
  CHECK(exact_sum({kMax, kMax}) == kInf);
  ExactSum past;
  past.add(kMax);
  past.add(kMax);
  CHECK(past.partials() == std::vector<double>{kInf});
  // 5000 values whose top piece is the largest a digit takes (just below 2^52): the digits
  // must carry on the way.
  const std::vector<double> heavy(5000, std::ldexp(0x1.fffffffffffffp52, 31 + 32 * 10 - 1074));
  CHECK(same(exact_sum(heavy), reference_sum(heavy)));
  std::vector<double> many(5000, kMax);  // carries through every digit
  many.resize(10000, -kMax);
  CHECK(exact_sum(many) == 0);
  many.push_back(0x1p-1074);
  CHECK(exact_sum(many) == 0x1p-1074);
}

TEST_CASE("ExactSum's non-finite values propagate as in fsum", "[coordinator][exact_sum]") {
  CHECK(exact_sum({1, kInf, 2}) == kInf);
  CHECK(exact_sum({kInf, kInf, -1e308}) == kInf);
  CHECK(exact_sum({-kInf, 5}) == -kInf);
  CHECK(std::isnan(exact_sum({kInf, 1, -kInf})));  // fsum: ValueError
  CHECK(std::isnan(exact_sum({1, std::nan(""), 2})));
  CHECK(std::isnan(exact_sum({std::nan(""), kInf})));
  // The state crosses partials(): a merged sum is as non-finite as its parts.
  ExactSum up, down, plain, merged;
  up.add(kInf);
  down.add(-kInf);
  plain.add(3);
  REQUIRE(up.partials().size() == 1);
  merged.add_partials(plain.partials());
  merged.add_partials(up.partials());
  CHECK(merged.value() == kInf);
  merged.add_partials(down.partials());
  CHECK(std::isnan(merged.value()));
}

TEST_CASE("ExactSum is the correctly rounded sum for any order and any split",
          "[coordinator][exact_sum]") {
  CGP_SEEDED(2024);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 60; ++trial) {
    INFO("trial " << trial);
    const std::size_t n = 1 + rng() % 400;
    // Up to 2^1012 each, so that no part of a split reaches 2^1024; or kernel-like values in
    // [0, 1], as KDE adds.
    std::vector<double> values;
    if (trial % 3 == 0) {
      values = wide_values(rng, n, 1012);
    } else if (trial % 3 == 1) {
      values = cancelling_values(rng, wide_values(rng, n, 1012));
    } else {
      for (std::size_t i = 0; i < 20 * n; ++i)
        values.push_back(std::exp(-std::ldexp(static_cast<double>(rng() >> 11), -50)));
    }
    ExactSum in_order;
    for (double v : values) in_order.add(v);
    const double expected = reference_sum(values);
    CHECK(same(in_order.value(), expected));
    CHECK(same(python_fsum(values), expected));  // the references agree
    // The expansion: increasing, non-overlapping partials of the sum's sign.
    const auto partials = in_order.partials();
    for (std::size_t i = 1; i < partials.size(); ++i) {
      CHECK(bit_span(partials[i - 1]).second < bit_span(partials[i]).first);
      CHECK(std::signbit(partials[i - 1]) == std::signbit(partials[i]));
    }

    for (int shuffle = 0; shuffle < 4; ++shuffle) {
      std::shuffle(values.begin(), values.end(), rng);
      CHECK(same(exact_sum(values), expected));
      // Split among up to 6 sums, merged as a gather does (their partials, concatenated, in
      // any order), into a sum that already holds some of the values.
      const std::size_t parts = 1 + rng() % 6;
      std::vector<ExactSum> sums(parts);
      ExactSum merged;
      for (double v : values) {
        const std::size_t to = rng() % (parts + 1);
        (to == parts ? merged : sums[to]).add(v);
      }
      std::vector<double> gathered;
      for (const ExactSum& s : sums) {
        const auto p = s.partials();
        gathered.insert(gathered.end(), p.begin(), p.end());
      }
      std::shuffle(gathered.begin(), gathered.end(), rng);
      merged.add_partials(gathered);
      CHECK(same(merged.value(), expected));
      CHECK(merged.partials() == partials);  // one canonical state for one sum
    }
  }
}

TEST_CASE("ExactSum adds runs of equal values exactly, across carries and partials",
          "[coordinator][exact_sum]") {
  // Equal neighbours are counted and added as one multiple (a query's charges mostly repeat):
  // runs of 1 to 5,000 copies, across the 1,024-add carry, mixed signs and magnitudes, partials
  // taken in the middle of a run, and non-finite runs.
  CGP_SEEDED(2025);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 40; ++trial) {
    INFO("trial " << trial);
    const auto distinct = wide_values(rng, 1 + rng() % 12, 1000);
    std::vector<double> values;
    ExactSum sum;
    std::vector<double> middle;  // partials taken mid-run, and the values up to there
    std::size_t middle_count = 0;
    while (values.size() < 20000) {
      const double v = distinct[rng() % distinct.size()];
      const std::size_t length = rng() % 4 == 0 ? 1 + rng() % 5000 : 1 + rng() % 3;
      for (std::size_t i = 0; i < length; ++i) {
        values.push_back(v);
        sum.add(v);
        if (middle.empty() && values.size() > 7000 && i > 0) {
          middle = sum.partials();
          middle_count = values.size();
        }
      }
    }
    CHECK(same(sum.value(), reference_sum(values)));
    REQUIRE(middle_count > 0);
    ExactSum front;
    front.add_partials(middle);
    CHECK(same(front.value(),
               reference_sum(
                   {values.begin(), values.begin() + static_cast<std::ptrdiff_t>(middle_count)})));
    // The same values one at a time with nothing equal next to each other: the same sum.
    ExactSum interleaved;
    for (std::size_t i = 0; i < values.size(); ++i) {
      interleaved.add(values[i]);
      interleaved.add(0.0);  // +0 between any two: no run is longer than one
    }
    CHECK(interleaved.partials() == sum.partials());
    // The same runs given as (value, copies), some of them split or empty, some next to a run of
    // the same value added one at a time: the same sum.
    ExactSum counted;
    for (std::size_t i = 0; i < values.size();) {
      std::size_t end = i;
      while (end < values.size() && values[end] == values[i] &&
             std::signbit(values[end]) == std::signbit(values[i]))
        ++end;
      const std::size_t length = end - i, first = rng() % (length + 1);
      counted.add(values[i], first);
      if (rng() % 2) counted.add(values[i], 0);
      if (rng() % 3 == 0 && length > first) {
        counted.add(values[i]);
        counted.add(values[i], length - first - 1);
      } else {
        counted.add(values[i], length - first);
      }
      i = end;
    }
    CHECK(counted.partials() == sum.partials());
  }
  ExactSum copies_of_inf;
  copies_of_inf.add(kInf, 3000);
  copies_of_inf.add(1.0, 10);
  CHECK(copies_of_inf.value() == kInf);
  copies_of_inf.add(-kInf, 3);
  CHECK(std::isnan(copies_of_inf.value()));
  ExactSum with_inf;
  for (int i = 0; i < 3000; ++i) with_inf.add(kInf);
  for (int i = 0; i < 10; ++i) with_inf.add(1.0);
  CHECK(with_inf.value() == kInf);
  for (int i = 0; i < 3; ++i) with_inf.add(-kInf);
  CHECK(std::isnan(with_inf.value()));
}
