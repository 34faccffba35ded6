#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "cgp/simulation/ground_truth.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using namespace cgp::simulation;

TEST_CASE("kNN oracle: k-d tree, brute force and candidate subsets agree", "[coordinator][truth]") {
  CGP_SEEDED(6001);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 100);
  for (std::size_t dim : {2, 3, 12}) {
    std::vector<double> points(3000 * dim);
    for (double& v : points) v = normal(rng);
    KnnOracle oracle(points, dim);
    std::vector<double> p(dim, 5.0);
    auto found = oracle.nearest(p, 15);
    // Brute force by hand.
    std::vector<std::pair<double, UserId>> all;
    for (UserId u = 0; u < 3000; ++u)
      all.emplace_back(sum_of_distances(points, dim, p, std::vector<UserId>{u}), u);
    std::sort(all.begin(), all.end());
    INFO("dim " << dim);
    REQUIRE(found.size() == 15);
    for (std::size_t a = 0; a < 15; ++a) CHECK(found[a] == all[a].second);
    std::vector<UserId> even;
    for (UserId u = 0; u < 3000; u += 2) even.push_back(u);
    auto among_even = oracle.nearest(p, 3, even);
    for (UserId u : among_even) CHECK(u % 2 == 0);
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
