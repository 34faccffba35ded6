// An exact sum of doubles, rounded once: the same double whatever the order of the values and
// however they were split among sums merged together (shard.hpp's ShardSum over shards).
//
// Values are added exactly, as integers: every finite double is a whole number of 2^-1074, and
// the sum is kept as that number in base-2^32 digits held in 64-bit words, so an add is two
// integer additions (a small superaccumulator, Neal 2015). partials() states the sum as a
// non-overlapping expansion (Shewchuk 1997): doubles, smallest first, whose exact sum is the
// sum; value() rounds it to nearest, ties to even, by Python's math.fsum final step. Proof and
// limits: coordinator/src/exact_sum.md.
//
// Non-finite values, as fsum: once a ±inf or NaN is added, value() is the plain sum of the
// non-finite values alone (±inf; NaN for a NaN or for +inf with −inf, where fsum raises
// ValueError) and finite values no longer count. A finite sum never overflows on the way (up
// to 2^70 values); when the exact sum itself reaches ±2^1024 it is ±inf, its rounded value
// (fsum raises OverflowError), and partials() says ±inf.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <span>
#include <vector>

namespace cgp::coordinator {

class ExactSum {
 public:
  // O(1). A value equal to the one before it (as a query's charges and savings mostly are) is
  // only counted, and a run of them is added at once, as the same digits times its length.
  void add(double value) {
    const auto bits = std::bit_cast<std::uint64_t>(value);
    if (bits == last_bits_ && has_last_) {
      ++repeats_;
      return;
    }
    add_new(bits);
  }
  // `copies` copies of value at once (the same as that many add(value)).
  void add(double value, std::uint64_t copies) {
    if (copies == 0) return;
    const auto bits = std::bit_cast<std::uint64_t>(value);
    if (!(bits == last_bits_ && has_last_)) {
      add_new(bits);
      --copies;
    }
    repeats_ += copies;
  }
  // Adds values whose exact sum is another sum's, e.g. what its partials() returned, several
  // sums' concatenated: the same as adding each, in any order.
  void add_partials(std::span<const double> partials);
  // The sum as doubles whose exact sum is this sum (another sum's add_partials takes them, and so
  // does math.fsum): a non-overlapping expansion, smallest first, all of the sum's sign, one per
  // 32-bit digit in use (a few for values of similar magnitude, at most 67); none for 0; or
  // the one non-finite value the sum is (±inf, NaN). The same for every order of the adds.
  std::vector<double> partials() const;
  // The exact sum rounded to nearest, ties to even; +0.0 when it is 0.
  double value() const;

 private:
  // Digit i counts units of 2^(32i − 1074); all but the top one are in [0, 2^32) after a carry.
  static constexpr std::size_t kDigits = 67;
  // add() of a value other than the last: the last one's repeats, then this one, go in.
  void add_new(std::uint64_t bits);
  // Adds `copies` copies of the double with these bits to the digits (or to the non-finite
  // sum).
  void add_copies(std::uint64_t bits, std::uint64_t copies);
  std::array<std::int64_t, kDigits> digits_{};
  unsigned adds_since_carry_ = 0;
  double special_ = 0;           // the non-finite values' sum (0: none)
  std::uint64_t last_bits_ = 0;  // the last value added (when has_last_)
  std::uint64_t repeats_ = 0;    // copies of it added since, not yet in the digits
  bool has_last_ = false;
};

}  // namespace cgp::coordinator
