#include "cgp/client/random.hpp"

#include <sodium.h>

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>

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

SecureRandom::SecureRandom() {
  reseed();
}

SecureRandom::~SecureRandom() {
  sodium_memzero(key_.data(), key_.size());
  sodium_memzero(block_.data(), block_.size());
}

void SecureRandom::reseed() {
  randombytes_buf(key_.data(), key_.size());
  owner_pid_ = static_cast<long>(::getpid());
  position_ = kBlockBytes;
}

void SecureRandom::refill() {
  static const unsigned char kNonce[crypto_stream_chacha20_NONCEBYTES] = {0};
  // One keystream call: the first 32 bytes become the next key, the rest is output. The key
  // is used for exactly one block, so the all-zero nonce never repeats under a key.
  std::array<unsigned char, kKeyBytes + kBlockBytes> stream;
  crypto_stream_chacha20(stream.data(), stream.size(), kNonce, key_.data());
  std::memcpy(key_.data(), stream.data(), kKeyBytes);
  std::memcpy(block_.data(), stream.data() + kKeyBytes, kBlockBytes);
  sodium_memzero(stream.data(), stream.size());
  position_ = 0;
}

void SecureRandom::fill(std::span<std::uint64_t> out) {
  if (static_cast<long>(::getpid()) != owner_pid_) reseed();
  auto* dest = reinterpret_cast<unsigned char*>(out.data());
  std::size_t wanted = out.size_bytes();
  while (wanted > 0) {
    if (position_ == kBlockBytes) refill();
    std::size_t take = std::min(wanted, kBlockBytes - position_);
    std::memcpy(dest, block_.data() + position_, take);
    sodium_memzero(block_.data() + position_, take);
    position_ += take;
    dest += take;
    wanted -= take;
  }
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

}  // namespace cgp::client
