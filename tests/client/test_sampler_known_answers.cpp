// The exact sampler's known answers: the same seeded bits give the same samples and
// releases whatever 128-bit integers the target has — the compiler's __int128 (x86-64, arm64)
// or the portable Boost path (armhf, i686; and cgp_client_portable_tests on every machine).
// The digests were recorded from the native build of the sources before the portable path
// existed (the sampler's code paths are unchanged by it).
#include <bit>
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "cgp/client/privatizer.hpp"
#include "cgp/client/random.hpp"
#include "discrete_gaussian.hpp"
#include "int128.hpp"

using namespace cgp::client;

namespace {

// FNV-1a over 64-bit words: a digest of a stream of samples.
struct Digest {
  std::uint64_t value = 0xcbf29ce484222325ULL;
  void add(std::uint64_t word) {
    for (int i = 0; i < 8; ++i) {
      value ^= (word >> (8 * i)) & 0xff;
      value *= 0x100000001b3ULL;
    }
  }
  void add_unsigned(const uint128& v) {
    add(low64(v));
    add(high64(v));
  }
  void add_signed(const int128& v) {
    const bool negative = v < 0;
    const uint128 magnitude = static_cast<uint128>(negative ? -v : v);
    add(negative ? 1ULL : 0ULL);
    add(low64(magnitude));
    add(high64(magnitude));
  }
};

}  // namespace

TEST_CASE("exact sampler: known answers for seeded bits, on every target and 128-bit path",
          "[client][sampler][portable]") {
  SimulationRandom source(20261125, 17);
  RandomBits bits(source);

  Digest gaussian;
  for (std::uint64_t sigma2 :
       {1ULL, 2ULL, 3ULL, 1000ULL, 123456789ULL, 1ULL << 40, (1ULL << 62) - 1, 1ULL << 62}) {
    const auto sampler = DiscreteGaussian::create(sigma2);
    REQUIRE(sampler);
    for (int i = 0; i < 300; ++i) gaussian.add_signed(sampler->sample(bits));
  }
  CHECK(gaussian.value == 0x71da5e6a306edc9fULL);

  Digest laplace;
  for (std::uint64_t t : {1ULL, 7ULL, 1ULL << 20, 1ULL << 40, 1ULL << 62})
    for (int i = 0; i < 300; ++i) laplace.add_signed(sample_discrete_laplace(t, bits));
  CHECK(laplace.value == 0x3904aff7c419ffadULL);

  Digest uniform;
  for (const uint128& bound : {uint128(1000), make_uint128(1, 0), make_uint128(1, 12345),
                               make_uint128(1ULL << 40, 99), make_uint128(~0ULL, ~0ULL)})
    for (int i = 0; i < 300; ++i) uniform.add_unsigned(uniform_below(bits, bound));
  Digest bernoulli;
  for (const auto& [n, d] : {std::pair{uint128(1), uint128(3)}, std::pair{uint128(7), uint128(2)},
                             std::pair{make_uint128(5, 0), make_uint128(3, 1)},
                             std::pair{make_uint128(1ULL << 62, 0), make_uint128(1ULL << 61, 7)}})
    for (int i = 0; i < 300; ++i) bernoulli.add(bernoulli_exp(n, d, bits) ? 1ULL : 0ULL);
  CHECK(uniform.value == 0x62c811532e6cc96eULL);
  CHECK(bernoulli.value == 0x0b19e5db6084f8e4ULL);

  // Whole releases, doubles included (their bits).
  Digest releases;
  for (const auto& [rho, capacity] :
       {std::pair{1e-5, 1.0}, std::pair{1e-3, 1.0}, std::pair{1.0, 1.0}, std::pair{1e6, 1e6}}) {
    const auto plan = plan_noise(1.0, rho, capacity);
    REQUIRE(plan);
    std::vector<double> out;
    const std::vector<double> phi{0.0, -1234.5678, 9.87654321e6};
    for (int i = 0; i < 50; ++i) {
      REQUIRE(privatize(phi, *plan, bits, out));
      for (double v : out) releases.add(std::bit_cast<std::uint64_t>(v));
    }
  }
  CHECK(releases.value == 0x9f972aa69989d915ULL);
}

TEST_CASE("128-bit helpers: two's complement, overflow and rounding to double",
          "[client][sampler][portable]") {
  for (const int128& v :
       {int128(0), int128(-1), int128(42), -static_cast<int128>(make_uint128(3, 7)),
        static_cast<int128>(make_uint128(1ULL << 62, 5))})
    CHECK(from_twos_complement_bits(twos_complement_bits(v)) == v);
  CHECK(twos_complement_bits(int128(-1)) == make_uint128(~0ULL, ~0ULL));
  CHECK(twos_complement_bits(int128(-2)) == make_uint128(~0ULL, ~1ULL));

  uint128 product;
  CHECK_FALSE(multiply_overflows(make_uint128(1, 0), make_uint128(0, ~0ULL), product));
  CHECK(product == make_uint128(~0ULL, 0));
  CHECK(multiply_overflows(make_uint128(1, 0), make_uint128(1, 0), product));
  CHECK(multiply_overflows(make_uint128(~0ULL, 0), uint128(2), product));

  // 2^117 + 2^64 is halfway between the doubles 2^117 and 2^117 + 2^65: ties to even (2^117);
  // one more and it rounds up; the sign is symmetric.
  const uint128 half = make_uint128((1ULL << 53), 0) + make_uint128(1, 0);
  CHECK(to_double(static_cast<int128>(half)) == 0x1p117);
  CHECK(to_double(static_cast<int128>(half + 1)) == 0x1p117 + 0x1p65);
  CHECK(to_double(-static_cast<int128>(half + 1)) == -(0x1p117 + 0x1p65));
  CHECK(to_double(int128(-12345)) == -12345.0);
  CHECK(to_double(static_cast<int128>(make_uint128(0, ~0ULL))) == 0x1p64);
}
