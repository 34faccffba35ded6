#include "cgp/coordinator/exact_sum.hpp"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <limits>

// value() rounds with error-free transformations of IEEE binary64, round to nearest: no
// extended precision, no reassociation.
static_assert(std::numeric_limits<double>::is_iec559 && FLT_EVAL_METHOD == 0,
              "ExactSum needs IEEE binary64 arithmetic evaluated in double");
#if defined(__FAST_MATH__)
#error "exact_sum.cpp must be built without -ffast-math: it relies on exact IEEE rounding"
#endif

namespace cgp::coordinator {
namespace {

constexpr std::int64_t kBase = std::int64_t{1} << 32;

// Adds between carries: an add moves a digit by less than 2^52, so 1024 of them keep every
// digit of [0, 2^32) below 2^63.
constexpr unsigned kCarryEvery = 1024;

// Every digit but the top one into [0, 2^32), the same number.
template <std::size_t N>
void carry(std::array<std::int64_t, N>& d) {
  for (std::size_t i = 0; i + 1 < d.size(); ++i) {
    const std::int64_t c = d[i] >> 32;  // ⌊d/2^32⌋: C++20 shifts signed values arithmetically
    d[i] -= c * kBase;
    d[i + 1] += c;
  }
}

// Rounds a non-overlapping expansion (increasing magnitude, no zeros) to nearest, ties to even:
// CPython's math_fsum after its partials are made (Modules/mathmodule.c).
double round_expansion(std::span<const double> p) {
  std::size_t n = p.size();
  if (n == 0) return 0.0;
  // From the largest partial down while the additions are exact; the first inexact one rounds.
  double hi = p[--n], lo = 0;
  while (n > 0) {
    const double x = hi, y = p[--n];
    hi = x + y;
    lo = y - (hi - x);  // Fast-Two-Sum, exact: |x| > |y| as the partials do not overlap
    if (lo != 0) break;
  }
  // hi + lo is exact and lo at most half the gap to hi's neighbour on lo's side. At exactly
  // half, the addition tied and went to even; the partials left below (together smaller than
  // lo's last bit) say on which side of the tie the exact sum lies: lo's side means the
  // neighbour, hi + 2·lo — an exact step only in a tie, which is how a tie is told.
  if (n > 0 && ((lo < 0 && p[n - 1] < 0) || (lo > 0 && p[n - 1] > 0))) {
    const double y = lo * 2, x = hi + y;
    if (x - hi == y) hi = x;
  }
  return hi;
}

}  // namespace

namespace {

// A finite double's place in the digits: |value| = m·2^(position − 1074), m < 2^53, whose bits
// go to digits k (low, < 2^32) and k + 1 (high, < 2^52), with the value's sign.
struct Pieces {
  unsigned k;
  std::int64_t low, high;
  bool negative;
};
bool non_finite(std::uint64_t bits) {
  return (bits >> 52 & 0x7ff) == 0x7ff;
}
Pieces pieces_of(std::uint64_t bits) {
  const auto field = static_cast<unsigned>(bits >> 52 & 0x7ff);
  std::uint64_t m = bits & ((std::uint64_t{1} << 52) - 1);
  if (field != 0) m |= std::uint64_t{1} << 52;
  const unsigned position = field != 0 ? field - 1 : 0;
  const unsigned shift = position % 32;
  return {position / 32, static_cast<std::int64_t>((m << shift) & 0xffffffff),
          static_cast<std::int64_t>(m >> (32 - shift)), (bits >> 63) != 0};
}

}  // namespace

void ExactSum::add_copies(std::uint64_t bits, std::uint64_t copies) {
  if (non_finite(bits)) {  // ±inf or NaN: once is as many times (fsum's rule, see the header)
    special_ += std::bit_cast<double>(bits);
    return;
  }
  const Pieces p = pieces_of(bits);
  // n copies at once move each digit as n adds would (by < n·2^52), so n is cut where the
  // carry is due: between carries every digit stays below 2^63, as with single adds.
  while (copies > 0) {
    const std::uint64_t n = std::min<std::uint64_t>(copies, kCarryEvery - adds_since_carry_);
    const auto times = static_cast<std::int64_t>(p.negative ? -n : n);
    digits_[p.k] += p.low * times;
    digits_[p.k + 1] += p.high * times;
    copies -= n;
    adds_since_carry_ += static_cast<unsigned>(n);
    if (adds_since_carry_ == kCarryEvery) {
      carry(digits_);
      adds_since_carry_ = 0;
    }
  }
}

void ExactSum::add_new(std::uint64_t bits) {
  if (repeats_ != 0) {
    add_copies(last_bits_, repeats_);
    repeats_ = 0;
  }
  last_bits_ = bits;
  has_last_ = true;
  if (non_finite(bits)) {
    special_ += std::bit_cast<double>(bits);
    return;
  }
  const Pieces p = pieces_of(bits);  // one copy: two integer additions
  digits_[p.k] += p.negative ? -p.low : p.low;
  digits_[p.k + 1] += p.negative ? -p.high : p.high;
  if (++adds_since_carry_ == kCarryEvery) {
    carry(digits_);
    adds_since_carry_ = 0;
  }
}

void ExactSum::add_partials(std::span<const double> partials) {
  for (double p : partials) add(p);
}

std::vector<double> ExactSum::partials() const {
  if (repeats_ != 0) {  // the counted repeats too, without changing this sum
    ExactSum whole = *this;
    whole.add_copies(whole.last_bits_, whole.repeats_);
    whole.repeats_ = 0;
    return whole.partials();
  }
  if (special_ != 0) return {special_};  // NaN != 0 too
  // The number in canonical digits: its magnitude's base-2^32 digits, and its sign.
  auto d = digits_;
  carry(d);
  const bool negative = d.back() < 0;
  if (negative) {
    for (std::int64_t& digit : d) digit = -digit;
    carry(d);
  }
  // Each non-zero digit is one double, exactly (< 2^32, a multiple of 2^-1074); digits occupy
  // disjoint bits, so the doubles do not overlap.
  std::vector<double> out;
  for (std::size_t i = 0; i < d.size(); ++i) {
    if (d[i] == 0) continue;
    const double part = std::ldexp(static_cast<double>(d[i]), static_cast<int>(32 * i) - 1074);
    if (std::isinf(part))  // the exact sum is past 2^1024: rounded, it is ±inf
      return {negative ? -std::numeric_limits<double>::infinity()
                       : std::numeric_limits<double>::infinity()};
    out.push_back(negative ? -part : part);
  }
  return out;
}

double ExactSum::value() const {
  return round_expansion(partials());
}

}  // namespace cgp::coordinator
