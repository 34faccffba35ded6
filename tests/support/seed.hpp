// Seeds for randomized tests: fixed by default so that every run is reproducible, printed so
// that a failure can be replayed, and overridable with CGP_TEST_SEED to explore.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>

namespace cgp::test {

inline std::uint64_t test_seed(std::uint64_t default_seed) {
  std::uint64_t seed = default_seed;
  if (const char* env = std::getenv("CGP_TEST_SEED")) seed = std::stoull(env);
  std::cout << "[seed] " << Catch::getResultCapture().getCurrentTestName() << ": " << seed
            << " (CGP_TEST_SEED=" << seed << " to replay)\n";
  return seed;
}

}  // namespace cgp::test

// Use inside a test case: declares `seed` and attaches it to every assertion's failure message.
#define CGP_SEEDED(default_seed)                                   \
  const std::uint64_t seed = ::cgp::test::test_seed(default_seed); \
  INFO("seed = " << seed)
