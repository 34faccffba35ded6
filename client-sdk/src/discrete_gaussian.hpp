// Exact sampling from the discrete Gaussian N_Z(0, σ²) with integer σ² (Canonne, Kamath & Steinke
// 2020, Algorithms 1–3), using integer arithmetic and uniform random bits only: no floating
// point touches the noise, so no floating-point artefact can reveal the value it is added to
// (Mironov 2012). See privatizer.md for how the device uses it.
#pragma once

#include <cstdint>

#include "cgp/client/random.hpp"
#include "cgp/common/expected.hpp"
#include "int128.hpp"

namespace cgp::client {

class DiscreteGaussian {
 public:
  // Largest σ² supported: keeps every intermediate of the fast path within 128 bits.
  static constexpr std::uint64_t kMaxSigma2 = std::uint64_t{1} << 62;

  // σ² ∈ [1, kMaxSigma2].
  static Expected<DiscreteGaussian> create(std::uint64_t sigma2);

  std::uint64_t sigma2() const noexcept { return sigma2_; }

  // One sample: P[x] ∝ exp(−x²/(2σ²)) over the integers, exactly. 128 bits so that no tail is
  // cut off (a truncated tail would break the Rényi bound between shifted outputs).
  int128 sample(RandomBits& bits) const;

 private:
  DiscreteGaussian(std::uint64_t sigma2, std::uint64_t t) noexcept;
  std::uint64_t sigma2_;
  std::uint64_t t_;      // ⌊σ⌋ + 1, the scale of the discrete Laplace proposal
  uint128 denominator_;  // 2σ²t², of the acceptance exponent (|Y|t − σ²)²/(2σ²t²)
};

// One exact sample of the discrete Laplace distribution with integer scale t ≥ 1:
// P[y] ∝ exp(−|y|/t) over the integers (CKS Algorithm 2 with s = 1), exactly, from uniform
// bits and integer arithmetic. t ∈ [1, 2^62]; |y| < 2^64·t fits int128.
int128 sample_discrete_laplace(std::uint64_t t, RandomBits& bits);

// Exactly uniform on [0, bound) for a bound beyond 64 bits (mask and reject), bound > 0.
uint128 uniform_below(RandomBits& bits, uint128 bound);

// Bernoulli(exp(−n/d)) exactly, n ≥ 0, d > 0 (CKS Algorithm 1). Exposed for tests.
bool bernoulli_exp(uint128 n, uint128 d, RandomBits& bits);

}  // namespace cgp::client
