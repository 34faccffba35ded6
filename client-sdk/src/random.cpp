#include "cgp/client/random.hpp"

#include <sodium.h>

#include <bit>

#include "cgp/common/validate.hpp"

namespace cgp::client {

Expected<std::unique_ptr<SecureRandom>> SecureRandom::create() {
  // sodium_init is idempotent and thread-safe; < 0 means no usable entropy source.
  if (sodium_init() < 0) {
    return make_error(ErrorCode::invalid_argument, "random",
                      "random: libsodium could not be initialised (no entropy source)");
  }
  return std::unique_ptr<SecureRandom>(new SecureRandom());
}

void SecureRandom::fill(std::span<std::uint64_t> out) {
  randombytes_buf(out.data(), out.size_bytes());
}

namespace {
std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

SimulationRandom::SimulationRandom(std::uint64_t seed, std::uint64_t stream) noexcept {
  // Distinct (seed, stream) pairs give unrelated states: the stream is mixed in before use.
  std::uint64_t x = seed ^ splitmix64(stream);
  for (auto& word : state_) word = splitmix64(x);
}

void SimulationRandom::fill(std::span<std::uint64_t> out) {
  auto& s = state_;
  for (auto& word : out) {
    word = std::rotl(s[0] + s[3], 23) + s[0];
    const std::uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = std::rotl(s[3], 45);
  }
}

void RandomBits::refill() {
  source_.fill(buffer_);
  position_ = 0;
}

std::uint64_t RandomBits::uniform_below(std::uint64_t bound) {
  if (bound <= 1) return 0;
  const std::uint64_t mask = ~std::uint64_t{0} >> std::countl_zero(bound - 1);
  for (;;) {
    std::uint64_t x = next() & mask;
    if (x < bound) return x;
  }
}

uint128 RandomBits::uniform_below(uint128 bound) {
  const auto high_bound = static_cast<std::uint64_t>(bound >> 64);
  if (high_bound == 0) return uniform_below(static_cast<std::uint64_t>(bound));
  // bound > 2^64: draw 64 + bitlength(high) bits, reject values ≥ bound (accepts > 1/2).
  const std::uint64_t high_mask =
      ~std::uint64_t{0} >> std::countl_zero(static_cast<std::uint64_t>((bound - 1) >> 64));
  for (;;) {
    uint128 x = (static_cast<uint128>(next() & high_mask) << 64) | next();
    if (x < bound) return x;
  }
}

}  // namespace cgp::client
