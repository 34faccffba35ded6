// The one source of randomness of a device (DESIGN §6.4): injected into the Device, seeded in
// tests and simulations, secure everywhere else. Nothing else in cgpkit draws random bits.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "cgp/common/expected.hpp"

namespace cgp::client {

class RandomSource {
 public:
  virtual ~RandomSource() = default;
  // Fills `out` with independent uniform 64-bit words.
  virtual void fill(std::span<std::uint64_t> out) = 0;
  // True only for the CSPRNG. Reported by the device; never chosen by a request.
  virtual bool is_secure() const noexcept = 0;
};

// The default of every device: a ChaCha20 keystream (libsodium crypto_stream_chacha20) keyed
// from the OS CSPRNG (randombytes_buf), with fast key erasure: each 4 KiB block starts with
// the next key, which replaces the old one, and served bytes are wiped. Reseeds from the OS
// after a fork (a child never repeats its parent's stream).
class SecureRandom final : public RandomSource {
 public:
  // Fails only if libsodium cannot initialise (no entropy source).
  static Expected<std::unique_ptr<SecureRandom>> create();
  ~SecureRandom() override;
  void fill(std::span<std::uint64_t> out) override;
  bool is_secure() const noexcept override { return true; }

 private:
  SecureRandom();
  void reseed();
  void refill();
  static constexpr std::size_t kKeyBytes = 32;
  static constexpr std::size_t kBlockBytes = 4096;
  std::array<unsigned char, kKeyBytes> key_{};
  std::array<unsigned char, kBlockBytes> block_{};
  std::size_t position_ = kBlockBytes;  // next unread byte of block_
  long owner_pid_ = 0;
};

// xoshiro256++ seeded by splitmix64 from (seed, stream): fast and reproducible, for simulations
// only. A device uses it only when built through the explicit simulation API
// (Device::open_for_simulation); no request or configuration read from the wire can select it.
class SimulationRandom final : public RandomSource {
 public:
  SimulationRandom(std::uint64_t seed, std::uint64_t stream) noexcept;
  void fill(std::span<std::uint64_t> out) override;
  bool is_secure() const noexcept override { return false; }

 private:
  std::array<std::uint64_t, 4> state_;
};

// Buffered access for the samplers: one virtual call per kWords words. Lives on the stack of
// one request; unused words are dropped with it.
class RandomBits {
 public:
  explicit RandomBits(RandomSource& source) noexcept : source_(source) {}
  RandomBits(const RandomBits&) = delete;
  RandomBits& operator=(const RandomBits&) = delete;

  std::uint64_t next() {
    if (position_ == kWords) refill();
    return buffer_[position_++];
  }
  bool bit() {
    if (bits_left_ == 0) {
      bit_pool_ = next();
      bits_left_ = 64;
    }
    bool b = bit_pool_ & 1;
    bit_pool_ >>= 1;
    --bits_left_;
    return b;
  }
  // Exactly uniform on [0, bound) (mask and reject), bound > 0.
  std::uint64_t uniform_below(std::uint64_t bound);

 private:
  // Small: a simulated user's release needs ~10 words, and every word drawn costs time.
  static constexpr std::size_t kWords = 8;
  void refill();
  RandomSource& source_;
  std::array<std::uint64_t, kWords> buffer_{};
  std::size_t position_ = kWords;
  std::uint64_t bit_pool_ = 0;
  int bits_left_ = 0;
};

}  // namespace cgp::client
