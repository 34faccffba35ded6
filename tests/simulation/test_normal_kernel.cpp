// The fast-noise kernel (simulation/src/fast_normals) and the batch paths the simulated fleet
// runs: each must give exactly what the one-at-a-time definition gives, for any batch.
#include <catch2/catch.hpp>

#include <hwy/targets.h>
#if defined(__AES__)  // x86 with -maes (tests/CMakeLists.txt): Random123's ARS needs AES-NI
#include <Random123/ars.h>
#endif

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "cgp/client/privatizer.hpp"
#include "cgp/client/statistic.hpp"
#include "cgp/common/geometry/signed_distance.hpp"
#include "fast_normals.hpp"  // simulation/src: the kernel is internal to the library
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::simulation;

namespace {

// The Box–Muller of normal_pairs' documentation, with glibc's scalar functions.
std::pair<double, double> reference_pair(std::uint64_t key, std::uint64_t stream,
                                         std::uint32_t block) {
  const auto [low, high] = ars_words(key, stream, block);
  const double u1 = 1 - static_cast<double>(low >> 12) * 0x1p-52;
  const double theta = 2 * M_PI * (static_cast<double>(high >> 12) * 0x1p-52);
  const double r = std::sqrt(-2 * std::log(u1));
  return {r * std::cos(theta), r * std::sin(theta)};
}

double normal_cdf(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0));
}

}  // namespace

// Known answers: Random123's ARS4x32_R<7> (ars.h, AES-NI) of the counter {key low, key high,
// block, 0} under the key {stream low, stream high, 0, 0}, printed once on an x86 machine: the
// portable ars_words must give them on any machine.
TEST_CASE("ars_words gives Random123's ARS-7 known answers", "[simulation][noise]") {
  struct Known {
    std::uint64_t key, stream;
    std::uint32_t block;
    std::array<std::uint64_t, 2> words;
  };
  const Known known[] = {
      {0, 0, 0, {0xc45798f3dacf61ffULL, 0x101e27f3113c7eebULL}},
      {1, 2, 3, {0x05b5459a64a7e08aULL, 0x5c7348de59fe156fULL}},
      {~0ULL, ~0ULL, 0xffffffffU, {0xd0f4c4c3bd306cc7ULL, 0xad2905768cfc647dULL}},
      {0x0123456789abcdefULL,
       0xfedcba9876543210ULL,
       7,
       {0xd5ca7ce2d695dc69ULL, 0xb7700805c0be9c0aULL}},
  };
  for (const Known& k : known) {
    INFO("key " << k.key << " stream " << k.stream << " block " << k.block);
    CHECK(ars_words(k.key, k.stream, k.block) == k.words);
  }
}

#if defined(__AES__)  // Random123's ARS needs AES-NI: the known answers above stand elsewhere
TEST_CASE("ars_words is Random123's ARS-7 where the CPU has AES-NI", "[simulation][noise]") {
  if (!__builtin_cpu_supports("aes")) {
    WARN("this CPU has no AES-NI: Random123's ARS cannot run here (known answers still checked)");
    return;
  }
  CGP_SEEDED(1210);
  std::mt19937_64 rng(seed);
  const r123::ARS4x32_R<kArsRounds> ars;
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t key = rng(), stream = rng();
    const auto block = static_cast<std::uint32_t>(rng());
    const r123::ARS4x32_R<kArsRounds>::ctr_type counter = {
        {static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32), block, 0}};
    const r123::ARS4x32_R<kArsRounds>::key_type k = {
        {static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32), 0, 0}};
    const auto expected = ars(counter, k);
    const auto got = ars_words(key, stream, block);
    CHECK(got[0] == (std::uint64_t{expected[1]} << 32 | expected[0]));
    CHECK(got[1] == (std::uint64_t{expected[3]} << 32 | expected[2]));
  }
}
#endif

TEST_CASE("normal_pairs is Box-Muller of the ARS words and the same for any batch",
          "[simulation][noise]") {
  CGP_SEEDED(1211);
  INFO("target " << normal_pairs_target());
  std::mt19937_64 rng(seed);
  const std::size_t n = 1000;
  const std::uint64_t stream = rng();
  std::vector<std::uint64_t> keys(n);
  std::vector<std::uint32_t> blocks(n);
  for (std::size_t i = 0; i < n; ++i)
    keys[i] = rng(), blocks[i] = static_cast<std::uint32_t>(i % 7);
  std::vector<double> all(2 * n);
  normal_pairs(stream, keys.data(), blocks.data(), n, all.data(), true);
  for (std::size_t i = 0; i < n; ++i) {
    const auto [z0, z1] = reference_pair(keys[i], stream, blocks[i]);
    // Highway's log, sin and cos are within 3 ulp of glibc's: the pair agrees to ~1e-15.
    CHECK(std::abs(all[2 * i] - z0) <= 1e-13);
    CHECK(std::abs(all[2 * i + 1] - z1) <= 1e-13);
  }
  // Any sub-batch, at any offset and length (vector tails included), gives the same bits.
  for (std::size_t offset : {0, 1, 5, 17}) {
    for (std::size_t count : {1, 2, 3, 7, 8, 9, 16, 31, 64, 100}) {
      std::vector<double> part(2 * count), first(count);
      normal_pairs(stream, keys.data() + offset, blocks.data() + offset, count, part.data(), true);
      normal_pairs(stream, keys.data() + offset, blocks.data() + offset, count, first.data(),
                   false);
      for (std::size_t i = 0; i < count; ++i) {
        CHECK(part[2 * i] == all[2 * (offset + i)]);
        CHECK(part[2 * i + 1] == all[2 * (offset + i) + 1]);
        CHECK(first[i] == all[2 * (offset + i)]);
      }
    }
  }
  // Every instruction set this build has and the CPU runs computes the same normals to within
  // the transcendental functions' last bits.
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    INFO("on " << normal_pairs_target());
    std::vector<double> here(2 * n);
    normal_pairs(stream, keys.data(), blocks.data(), n, here.data(), true);
    for (std::size_t i = 0; i < 2 * n; ++i) CHECK(std::abs(here[i] - all[i]) <= 1e-13);
  }
  hwy::SetSupportedTargetsForTest(0);  // back to what the CPU supports
  // No blocks means block 0.
  std::vector<double> zero_block(2), explicit_zero(2);
  const std::uint32_t block0 = 0;
  normal_pairs(stream, keys.data(), nullptr, 1, zero_block.data(), true);
  normal_pairs(stream, keys.data(), &block0, 1, explicit_zero.data(), true);
  CHECK(zero_block == explicit_zero);
}

// 10^6 normals (5·10^5 pairs, one key each) against Φ by one-sample KS: P[√n·D > c] ≤
// 2·exp(−2c²), c = √(ln(2/1e-7)/2) ≈ 2.90, D_crit ≈ 0.0029 at a false-failure rate ≤ 1e-7.
// The two halves of a pair are independent: their sample correlation is within 6/√m
// (false-failure rate < 1e-8). A pair's angle is uniform on the circle (the angle's exact
// reduction puts each octant's sines and cosines back with their signs): KS of
// atan2(z₁, z₀)/2π against U[0, 1) over the 5·10^5 pairs, D_crit = 2.90/√m at ≤ 1e-7.
TEST_CASE("normal_pairs draws standard normals", "[simulation][noise][statistical]") {
  CGP_SEEDED(1212);
  std::mt19937_64 rng(seed);
  const std::size_t pairs = 500000;
  std::vector<std::uint64_t> keys(pairs);
  for (auto& k : keys) k = rng();
  std::vector<double> z(2 * pairs);
  normal_pairs(rng(), keys.data(), nullptr, pairs, z.data(), true);
  double cross = 0;
  for (std::size_t i = 0; i < pairs; ++i) cross += z[2 * i] * z[2 * i + 1];
  const double correlation = cross / static_cast<double>(pairs);
  INFO("correlation " << correlation);
  CHECK(std::abs(correlation) <= 6 / std::sqrt(static_cast<double>(pairs)));
  std::vector<double> turns(pairs);
  for (std::size_t i = 0; i < pairs; ++i)
    turns[i] = std::atan2(z[2 * i + 1], z[2 * i]) / (2 * M_PI) + 0.5;
  std::sort(turns.begin(), turns.end());
  double angle_d = 0;
  for (std::size_t i = 0; i < pairs; ++i)
    angle_d = std::max({angle_d, std::abs(turns[i] - static_cast<double>(i) / pairs),
                        std::abs(static_cast<double>(i + 1) / pairs - turns[i])});
  const double angle_critical =
      std::sqrt(std::log(2 / 1e-7) / 2) / std::sqrt(static_cast<double>(pairs));
  INFO("angle KS D = " << angle_d << ", critical " << angle_critical);
  CHECK(angle_d <= angle_critical);
  std::sort(z.begin(), z.end());
  const double n = static_cast<double>(z.size());
  double d = 0;
  for (std::size_t i = 0; i < z.size(); ++i) {
    const double f = normal_cdf(z[i]);
    d = std::max({d, std::abs(f - static_cast<double>(i) / n),
                  std::abs(static_cast<double>(i + 1) / n - f)});
  }
  const double critical = std::sqrt(std::log(2 / 1e-7) / 2) / std::sqrt(n);
  INFO("KS D = " << d << ", critical " << critical);
  CHECK(d <= critical);
  // The power of the test: a σ 2% too small is refused at the same threshold. Its distance
  // from Φ is max |Φ(z/0.98) − Φ(z)| ≈ 0.02·φ(1)·1 ≈ 0.0049, well past the critical 0.0029 (a
  // 1% error, ≈ 0.0024, sits below it: detecting it was luck of the sample).
  double shrunk = 0;
  for (std::size_t i = 0; i < z.size(); ++i) {
    const double f = normal_cdf(0.98 * z[i]);
    shrunk = std::max(shrunk, std::abs(f - static_cast<double>(i) / n));
  }
  CHECK(shrunk > critical);
}

// The device's rounding, written once (privatizer.cpp): round-half-away of φ/u clamped to
// ±2^56, plus round-half-away of σ_grid·z, times u — checked against std::llround and ldexp.
TEST_CASE("privatize_with_normals rounds as the device's grid does", "[simulation][noise]") {
  CGP_SEEDED(1213);
  std::mt19937_64 rng(seed);
  const auto plan = client::plan_noise(1.0, 1e-3, 1.0);
  REQUIRE(plan.has_value());
  const double u = plan->grid(), sigma_grid = std::sqrt(static_cast<double>(plan->sigma2_grid));
  std::vector<double> phi, z;
  std::normal_distribution<double> normal(0, 1);
  std::uniform_real_distribution<double> spread(-1e4, 1e4);
  for (int i = 0; i < 2000; ++i) phi.push_back(spread(rng)), z.push_back(normal(rng));
  // Halves on both sides, both clamps, and the values a clamp must send to its bounds.
  for (double half : {0.5, 1.5, -0.5, -2.5, 1e6 + 0.5}) phi.push_back(half * u), z.push_back(0);
  for (double big : {0x1p80 * u, -0x1p80 * u, HUGE_VAL, -HUGE_VAL, std::nan("")})
    phi.push_back(big), z.push_back(0);
  z.push_back(0.5 / sigma_grid), phi.push_back(0);
  z.push_back(-0.5 / sigma_grid), phi.push_back(0);
  std::vector<double> out(phi.size());
  client::privatize_with_normals(phi, *plan, z, out);
  for (std::size_t i = 0; i < phi.size(); ++i) {
    INFO("phi " << phi[i] << " z " << z[i]);
    const double units =
        std::fmin(std::fmax(std::ldexp(phi[i], -plan->grid_exponent), -0x1p56), 0x1p56);
    const long long expected = std::llround(units) + std::llround(sigma_grid * z[i]);
    CHECK(out[i] == std::ldexp(static_cast<double>(expected), plan->grid_exponent));
  }
}

TEST_CASE("privatize_normals is normal_pairs then privatize_with_normals, bit for bit",
          "[simulation][noise]") {
  CGP_SEEDED(1214);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> spread(-1e4, 1e4);
  for (double rho : {1e-9, 1e-3, 7.0, 1e4}) {
    const auto plan = client::plan_noise(1.0, rho, 4 * rho);
    REQUIRE(plan.has_value());
    const double u = plan->grid(), sigma_grid = std::sqrt(static_cast<double>(plan->sigma2_grid));
    std::vector<double> phi;
    for (int i = 0; i < 300; ++i) phi.push_back(spread(rng));
    for (double half : {0.5, 1.5, -0.5, -2.5, 1e6 + 0.5, 0x1p52 + 1, -0x1p55 - 2})
      phi.push_back(half * u);
    for (double odd : {0x1p80 * u, -0x1p80 * u, HUGE_VAL, -HUGE_VAL, std::nan(""), 0.0, -0.0})
      phi.push_back(odd);
    if (phi.size() % 2) phi.push_back(u / 3);
    for (bool pairs : {false, true}) {
      // Every short batch length, for the padded last vector.
      for (std::size_t count :
           {std::size_t{1}, std::size_t{3}, std::size_t{7}, std::size_t{13}, phi.size() / 2}) {
        INFO("rho " << rho << " pairs " << pairs << " count " << count << " sigma_grid "
                    << sigma_grid);
        const std::size_t values = pairs ? 2 * count : count;
        std::vector<std::uint64_t> keys(count);
        std::vector<std::uint32_t> blocks(count);
        for (std::size_t i = 0; i < count; ++i)
          keys[i] = rng(), blocks[i] = static_cast<std::uint32_t>(i % 5);
        const std::uint64_t stream = rng();
        std::vector<double> z(values), expected(values), fused(values);
        normal_pairs(stream, keys.data(), blocks.data(), count, z.data(), pairs);
        const std::span<const double> in(phi.data(), values);
        client::privatize_with_normals(in, *plan, z, expected);
        privatize_normals(stream, keys.data(), blocks.data(), count, pairs, phi.data(), sigma_grid,
                          plan->grid_scale(), u, fused.data());
        for (std::size_t i = 0; i < values; ++i) {
          INFO("phi " << phi[i] << " z " << z[i]);
          REQUIRE(std::bit_cast<std::uint64_t>(fused[i]) ==
                  std::bit_cast<std::uint64_t>(expected[i]));
        }
      }
    }
  }
}

TEST_CASE("privatize_normals_each gives each item its own plan's values, bit for bit",
          "[simulation][noise]") {
  CGP_SEEDED(1215);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> spread(-1e4, 1e4);
  std::vector<client::NoisePlan> plans;
  for (double rho : {0.2, 7.0, 300.0, 1e4}) plans.push_back(*client::plan_noise(1.0, rho, 4e4));
  for (bool pairs : {false, true}) {
    for (std::size_t count : {std::size_t{1}, std::size_t{3}, std::size_t{7}, std::size_t{301}}) {
      INFO("pairs " << pairs << " count " << count);
      const std::size_t per_item = pairs ? 2 : 1, values = per_item * count;
      std::vector<std::uint64_t> keys(count);
      std::vector<std::uint32_t> blocks(count);
      std::vector<double> phi(values), sigma(count), scale(count), grid(count);
      std::vector<std::size_t> plan_of(count);
      for (std::size_t i = 0; i < count; ++i) {
        keys[i] = rng(), blocks[i] = static_cast<std::uint32_t>(i % 3);
        plan_of[i] = rng() % plans.size();
        const client::NoisePlan& plan = plans[plan_of[i]];
        sigma[i] = std::sqrt(static_cast<double>(plan.sigma2_grid));
        scale[i] = plan.grid_scale(), grid[i] = plan.grid();
        for (std::size_t t = 0; t < per_item; ++t)
          phi[per_item * i + t] =
              i % 17 == 5 ? (static_cast<double>(i) + 0.5) * plan.grid() : spread(rng);
      }
      const std::uint64_t stream = rng();
      std::vector<double> each(values);
      privatize_normals_each(stream, keys.data(), blocks.data(), count, pairs, phi.data(),
                             sigma.data(), scale.data(), grid.data(), each.data());
      for (std::size_t i = 0; i < count; ++i) {
        double alone[2];
        privatize_normals(stream, &keys[i], &blocks[i], 1, pairs, &phi[per_item * i], sigma[i],
                          scale[i], grid[i], alone);
        for (std::size_t t = 0; t < per_item; ++t) {
          INFO("item " << i << " plan " << plan_of[i]);
          REQUIRE(std::bit_cast<std::uint64_t>(each[per_item * i + t]) ==
                  std::bit_cast<std::uint64_t>(alone[t]));
        }
      }
    }
  }
}

// Keys for normal_halves: partners side by side, partners apart, lone keys, a key twice, and
// partners astride the kernel's blocks of 256 items (at 255/256 and 511/512). dense: partners
// side by side only (the kernel shares their pairs), else mostly not (one pair an item).
std::vector<std::uint64_t> halves_keys(std::mt19937_64& rng, std::size_t count,
                                       bool dense = false) {
  std::vector<std::uint64_t> keys;
  while (keys.size() < count) {
    const std::uint64_t pair = rng() & ~std::uint64_t{1};
    switch (dense ? 2 : rng() % 5) {
      case 0:
        keys.push_back(pair);
        break;  // even, alone
      case 1:
        keys.push_back(pair | 1);
        break;  // odd, alone
      case 2:
        keys.push_back(pair), keys.push_back(pair | 1);
        break;  // partners
      case 3:
        keys.push_back(pair | 1), keys.push_back(pair | 1);
        break;  // one key twice
      default:
        keys.push_back(pair), keys.push_back(rng()), keys.push_back(pair | 1);  // apart
    }
  }
  keys.resize(count);
  for (std::size_t edge : {std::size_t{255}, std::size_t{511}})
    if (edge + 1 < count) keys[edge + 1] = keys[edge] ^ 1;
  return keys;
}

TEST_CASE("normal_halves gives each key its half of the pair it shares, for any batch",
          "[simulation][noise]") {
  CGP_SEEDED(1216);
  std::mt19937_64 rng(seed);
  const std::size_t n = 700;
  const auto keys = halves_keys(rng, n);
  const std::uint64_t stream = rng();
  std::vector<double> all(n);
  normal_halves(stream, keys.data(), n, all.data());
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t counter = keys[i] & ~std::uint64_t{1};
    double pair[2];
    normal_pairs(stream, &counter, nullptr, 1, pair, true);
    INFO("item " << i << " key " << keys[i]);
    REQUIRE(std::bit_cast<std::uint64_t>(all[i]) ==
            std::bit_cast<std::uint64_t>(pair[keys[i] & 1]));
  }
  // Partners take the two halves of one pair: the values differ (the pair's cos and sin).
  CHECK(all[255] != all[256]);
  // Any sub-batch gives the same values: a partner outside the batch changes nothing.
  for (int trial = 0; trial < 40; ++trial) {
    const std::size_t offset = rng() % n, count = 1 + rng() % (n - offset);
    std::vector<double> part(count);
    normal_halves(stream, keys.data() + offset, count, part.data());
    for (std::size_t i = 0; i < count; ++i) {
      INFO("offset " << offset << " count " << count << " item " << i);
      REQUIRE(std::bit_cast<std::uint64_t>(part[i]) ==
              std::bit_cast<std::uint64_t>(all[offset + i]));
    }
  }
}

TEST_CASE("privatize_normal_halves is normal_halves then privatize_with_normals, bit for bit",
          "[simulation][noise]") {
  CGP_SEEDED(1217);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> spread(-1e4, 1e4);
  std::vector<client::NoisePlan> plans;
  for (double rho : {1e-9, 1e-3, 7.0, 1e4}) plans.push_back(*client::plan_noise(1.0, rho, 4 * rho));
  for (const auto& [count, dense] :
       {std::pair{std::size_t{1}, false}, std::pair{std::size_t{3}, true},
        std::pair{std::size_t{7}, false}, std::pair{std::size_t{600}, false},
        std::pair{std::size_t{601}, true}}) {
    const auto keys = halves_keys(rng, count, dense);
    std::vector<double> phi(count), sigma(count), scale(count), grid(count);
    std::vector<std::size_t> plan_of(count);
    for (std::size_t i = 0; i < count; ++i) {
      plan_of[i] = rng() % plans.size();
      const client::NoisePlan& plan = plans[plan_of[i]];
      sigma[i] = std::sqrt(static_cast<double>(plan.sigma2_grid));
      scale[i] = plan.grid_scale(), grid[i] = plan.grid();
      phi[i] = i % 17 == 5 ? (static_cast<double>(i) + 0.5) * plan.grid() : spread(rng);
    }
    for (double odd : {HUGE_VAL, -HUGE_VAL, std::nan(""), -0.0})
      if (count > 4) phi[rng() % count] = odd;
    const std::uint64_t stream = rng();
    std::vector<double> z(count);
    normal_halves(stream, keys.data(), count, z.data());
    // One plan for all.
    for (const client::NoisePlan& plan : plans) {
      INFO("count " << count << " dense " << dense << " sigma2_grid " << plan.sigma2_grid);
      std::vector<double> expected(count), fused(count);
      client::privatize_with_normals(phi, plan, z, expected);
      privatize_normal_halves(stream, keys.data(), count, phi.data(),
                              std::sqrt(static_cast<double>(plan.sigma2_grid)), plan.grid_scale(),
                              plan.grid(), fused.data());
      for (std::size_t i = 0; i < count; ++i) {
        INFO("item " << i << " phi " << phi[i] << " z " << z[i]);
        REQUIRE(std::bit_cast<std::uint64_t>(fused[i]) ==
                std::bit_cast<std::uint64_t>(expected[i]));
      }
    }
    // Each item its own plan.
    std::vector<double> each(count);
    privatize_normal_halves_each(stream, keys.data(), count, phi.data(), sigma.data(), scale.data(),
                                 grid.data(), each.data());
    for (std::size_t i = 0; i < count; ++i) {
      double expected = 0;
      client::privatize_with_normals({&phi[i], 1}, plans[plan_of[i]], {&z[i], 1}, {&expected, 1});
      INFO("count " << count << " item " << i << " plan " << plan_of[i]);
      REQUIRE(std::bit_cast<std::uint64_t>(each[i]) == std::bit_cast<std::uint64_t>(expected));
    }
  }
}

TEST_CASE("batch distances give the same bits as one point at a time", "[simulation][geometry]") {
  CGP_SEEDED(1214);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> coordinate(-5000, 5000);
  // 303: a batch that is not a whole number of the four users summed side by side.
  constexpr std::size_t n = 303;
  for (std::size_t d : {1, 2, 3, 7, 50}) {
    INFO("dimension " << d);
    std::vector<double> points(n * d), p(d), lo(d), hi(d);
    for (double& v : points) v = coordinate(rng);
    for (std::size_t t = 0; t < d; ++t) p[t] = coordinate(rng), lo[t] = -1000, hi[t] = 1500;
    std::vector<geometry::Region> regions = {*geometry::Box::create(lo, hi),
                                             *geometry::Ball::create(p, 2000)};
    if (d == 2) regions.push_back(*geometry::Polygon::create({{0, 0}, {3000, 0}, {1000, 2500}}));
    std::vector<double> batch(n);
    geometry::euclidean_distances(p, points.data(), n, batch.data());
    for (std::size_t i = 0; i < n; ++i)
      CHECK(batch[i] == geometry::euclidean_distance({points.data() + i * d, d}, p));
    for (const auto& region : regions) {
      geometry::signed_distances(region, points.data(), n, batch.data());
      for (std::size_t i = 0; i < n; ++i)
        CHECK(batch[i] == geometry::signed_distance(region, {points.data() + i * d, d}));
      client::StatisticSpec spec;
      spec.kind = StatisticKind::signed_distance_to_region;
      spec.region = &region;
      std::vector<double> evaluated(n);
      client::evaluate_unchecked(spec, points.data(), n, d, evaluated.data());
      CHECK(evaluated == batch);
    }
  }
}
