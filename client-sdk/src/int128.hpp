// 128-bit integers for the exact sampler: the compiler's __int128 where it has one
// (x86-64, arm64), Boost.Multiprecision's fixed 128-bit cpp_int elsewhere (armv7, i686, 32-bit
// MCUs) or when CGP_PORTABLE_INT128 is defined (the test build of the portable path). Every
// operation the sampler needs is exact integer arithmetic on values below 2^127, where both
// types agree; the helpers below are the few places where their semantics differ (wrapping
// conversions, overflow checks, conversion to double), written so that both give identical
// results — the sampler's output is then the same on every target (tested with known answers).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__SIZEOF_INT128__) && !defined(CGP_PORTABLE_INT128)
#define CGP_NATIVE_INT128 1
#else
#include <boost/multiprecision/cpp_int.hpp>
#endif

namespace cgp::client {

#ifdef CGP_NATIVE_INT128
__extension__ typedef unsigned __int128 uint128;
__extension__ typedef __int128 int128;
#else
// Boost's unsigned type wraps modulo 2^128 (unchecked); its signed type is sign-magnitude,
// which is why two's-complement bits go through the helpers below.
using uint128 = boost::multiprecision::uint128_t;
using int128 = boost::multiprecision::int128_t;
#endif

// The low and high 64 bits (Boost's conversion to a narrower integer saturates: mask first).
inline std::uint64_t low64(const uint128& x) {
  return static_cast<std::uint64_t>(x & uint128(~std::uint64_t{0}));
}
inline std::uint64_t high64(const uint128& x) {
  return low64(x >> 64);
}
inline uint128 make_uint128(std::uint64_t high, std::uint64_t low) {
  return (uint128(high) << 64) | uint128(low);
}

// a·b into `product`, or true if it does not fit 128 bits (then `product` is unspecified).
inline bool multiply_overflows(const uint128& a, const uint128& b, uint128& product) {
#ifdef CGP_NATIVE_INT128
  return __builtin_mul_overflow(a, b, &product);
#else
  if (a != 0 && b > (~uint128(0)) / a) return true;
  product = a * b;
  return false;
#endif
}

// Two's-complement bits of a value in [−2^127, 2^127) and back (how the ledger stores one).
inline uint128 twos_complement_bits(const int128& value) {
#ifdef CGP_NATIVE_INT128
  return static_cast<uint128>(value);
#else
  if (value >= 0) return static_cast<uint128>(value);
  return ~static_cast<uint128>(-value) + 1;
#endif
}
inline int128 from_twos_complement_bits(const uint128& bits) {
#ifdef CGP_NATIVE_INT128
  return static_cast<int128>(bits);
#else
  if ((high64(bits) >> 63) == 0) return static_cast<int128>(bits);
  return -static_cast<int128>(~bits + 1);
#endif
}

// The double nearest to `value` (ties to even), as the compiler's conversion rounds: values
// beyond 64 bits keep their top 64 bits with a sticky bit for the rest, which rounds the same
// as the full value (64 > 53 + 2 bits).
inline double to_double(const int128& value) {
#ifdef CGP_NATIVE_INT128
  return static_cast<double>(value);
#else
  const bool negative = value < 0;
  const uint128 magnitude = static_cast<uint128>(negative ? -value : value);
  double result;
  if (high64(magnitude) == 0) {
    result = static_cast<double>(low64(magnitude));
  } else {
    int shift = 0;
    for (uint128 rest = magnitude >> 64; rest != 0; rest >>= 1) ++shift;
    const uint128 dropped = magnitude & ((uint128(1) << shift) - 1);
    const std::uint64_t top = low64(magnitude >> shift) | (dropped != 0 ? 1u : 0u);
    result = std::ldexp(static_cast<double>(top), shift);
  }
  return negative ? -result : result;
#endif
}

}  // namespace cgp::client
