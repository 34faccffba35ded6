// Repetition counts for CPU-bound tests in CI's slow legs: under AddressSanitizer (several
// times slower) and under qemu-user (cross builds define CGP_TEST_EMULATED), where a test looks
// for memory errors, undefined behaviour and the target's arithmetic rather than statistical
// power, and the release leg runs every test at its full count. A statistical test computes its
// limits from the count it ran, so its false-failure rate is the same in every leg.
#pragma once

namespace cgp::test {

#if defined(__SANITIZE_ADDRESS__) || defined(CGP_TEST_EMULATED)
inline constexpr bool kSlowBuild = true;
#else
inline constexpr bool kSlowBuild = false;
#endif

// `full` in the release build, `slow` under the sanitizers or emulation.
constexpr int repetitions(int full, int slow) {
  return kSlowBuild ? slow : full;
}

}  // namespace cgp::test
