#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "cgp/simulation/ground_truth.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using namespace cgp::simulation;

TEST_CASE("kNN oracle: scans, the k-d tree and candidate subsets agree", "[coordinator][truth]") {
  CGP_SEEDED(6001);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 100);
  constexpr std::size_t n = 3000, k = 15;
  for (std::size_t dim : {2, 3, 12}) {
    INFO("dim " << dim);
    std::vector<double> points(n * dim);
    for (double& v : points) v = normal(rng);
    // Ties: every tenth point repeats the one before.
    for (std::size_t u = 10; u < n; u += 10)
      std::copy_n(points.begin() + static_cast<std::ptrdiff_t>((u - 1) * dim), dim,
                  points.begin() + static_cast<std::ptrdiff_t>(u * dim));
    KnnOracle oracle(points, dim);
    // 130 queries: the oracle scans the first hundred and builds its tree (dim ≤ 8) after.
    for (int query = 0; query < 130; ++query) {
      INFO("query " << query);
      const auto left_out = static_cast<UserId>(rng() % n);
      std::vector<double> p(points.begin() + static_cast<std::ptrdiff_t>(left_out * dim),
                            points.begin() + static_cast<std::ptrdiff_t>((left_out + 1) * dim));
      if (query % 2) p[0] += 1.0;  // off the data too
      std::vector<UserId> all_but_one;
      for (UserId u = 0; u < n; ++u)
        if (u != left_out) all_but_one.push_back(u);
      // Brute force by hand: each user's distance, sorted.
      std::vector<std::pair<double, UserId>> ranked;
      for (UserId u = 0; u < n; ++u)
        ranked.emplace_back(sum_of_distances(points, dim, p, std::vector<UserId>{u}), u);
      std::sort(ranked.begin(), ranked.end());
      for (const bool exclude : {false, true}) {
        const auto found = exclude ? oracle.nearest(p, k, all_but_one) : oracle.nearest(p, k);
        REQUIRE(found.size() == k);
        std::vector<double> expected;
        for (const auto& [distance, u] : ranked)
          if (expected.size() < k && !(exclude && u == left_out)) expected.push_back(distance);
        for (std::size_t a = 0; a < k; ++a) {
          // Tied users may come in either order: compare distances, and that each is a user.
          CHECK(sum_of_distances(points, dim, p, std::vector<UserId>{found[a]}) == expected[a]);
          CHECK(!(exclude && found[a] == left_out));
        }
        std::vector<UserId> unique(found);
        std::sort(unique.begin(), unique.end());
        CHECK(std::adjacent_find(unique.begin(), unique.end()) == unique.end());
      }
    }
    std::vector<UserId> even;
    for (UserId u = 0; u < n; u += 2) even.push_back(u);
    std::vector<double> p(dim, 5.0);
    auto among_even = oracle.nearest(p, 3, even);
    REQUIRE(among_even.size() == 3);
    for (UserId u : among_even) CHECK(u % 2 == 0);
    CHECK(oracle.nearest(p, 0).empty());
    CHECK(oracle.nearest(p, n + 5).size() == n);
  }
}

TEST_CASE("exact answers and metrics", "[coordinator][truth]") {
  std::vector<double> points{0, 0, 1, 1, 5, 5, -3, 2};
  double lo[2] = {-0.5, -0.5}, hi[2] = {2, 2};
  auto box = geometry::Region(*geometry::Box::create(lo, hi));
  CHECK(exact_count(points, 2, box) == 2);
  std::vector<UserId> some{2, 3};
  CHECK(exact_count(points, 2, box, some) == 0);
  double p[2] = {0, 0};
  CHECK(exact_kde(points, 2, p, 1.0, std::vector<UserId>{0}) == 1.0);
  CHECK(exact_kde(points, 2, p, 1.0) ==
        Approx((1 + std::exp(-1.0) + std::exp(-25.0) + std::exp(-6.5)) / 4));
  CHECK(count_error(12, 10) == Approx(0.2));
  CHECK(count_error(3, 0) == 3);
  CHECK(l1_error(0.25, 0.5) == 0.25);
  CHECK(distance_error(11, 10) == Approx(0.1));
  const std::vector<coordinator::Charge> charged{coordinator::Charge{0}, coordinator::Charge{0.5},
                                                 coordinator::Charge{1.0},
                                                 coordinator::Charge{0.25}};
  CHECK(privacy_saving(charged, 1.0) == Approx((1 + 0.5 + 0 + 0.75) / 4));
}
