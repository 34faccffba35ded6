// SplitMix64's finalizer (Steele, Lea & Flood, OOPSLA'14): a bijection of 64-bit words whose
// every output bit depends on every input bit. The simulation derives its keys and synthetic
// points from (seed, id) with it, so that a user's values never depend on other users.
#pragma once

#include <cstdint>

namespace cgp::simulation {

inline std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace cgp::simulation
