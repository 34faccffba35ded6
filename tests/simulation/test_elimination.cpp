#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "cgp/common/geometry/signed_distance.hpp"
#include "cgp/coordinator/elimination.hpp"
#include "cgp/simulation/ground_truth.hpp"
#include "fleet_fixtures.hpp"
#include "support/binomial_limit.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using namespace cgp::simulation;

// Lemmas 5.2 and 5.3 promise failure probability ≤ β₀ per run. Over R independent runs the
// failures are Binomial(R, p ≤ β₀); a correct implementation exceeds the limit with probability
// ≤ 1e-8 (the exact binomial tail). The bound is loose (a union bound),
// so the observed rate is usually far below β₀; the test guards against a systematic excess.
namespace {
constexpr int kRuns = 400;
constexpr double kBeta0 = 0.05;
int binomial_limit() {
  return test::binomial_upper_limit(kRuns, kBeta0, 1e-8);
}
}  // namespace

TEST_CASE("Lemma 5.2: PIE-NI misclassifies with probability at most beta0",
          "[coordinator][elimination][statistical]") {
  CGP_SEEDED(5002);
  // Users concentrated near the boundary of a square make misclassification plausible.
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> offset(0, 30);
  const std::size_t n = 300;
  std::vector<double> points(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    points[2 * i] = 1000 + offset(rng);  // around the left edge x = 1000
    points[2 * i + 1] = 1000 + 1000.0 * static_cast<double>(i) / n;
  }
  double lo[2] = {1000, 0}, hi[2] = {3000, 3000};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  for (Triple triple : {Triple::point, Triple::distance}) {
    int failures = 0;
    for (int run = 0; run < kRuns; ++run) {
      auto fleet = test::make_fleet(points, 2, 1.0, seed + static_cast<std::uint64_t>(run), 1);
      BudgetMirror mirror(n, fleet.initial_budget());
      auto rho = test::charge_everyone(1e-3);  // σ ≈ 22 m per full release
      EliminationSetup setup;
      setup.query_id = "lemma-5.2";
      setup.phi = {StatisticKind::signed_distance_to_region, {}, &range};
      setup.triple = triple;
      setup.rounds = 8;
      setup.beta0 = kBeta0;
      auto result = eliminate_noninteractive(fleet, mirror, setup, rho, 0, 0);
      REQUIRE(result.has_value());
      bool wrong = false;
      for (UserId u : result->s1) wrong |= !geometry::inside(range, fleet.location(u));
      for (UserId u : result->s0) wrong |= geometry::inside(range, fleet.location(u));
      failures += wrong;
    }
    INFO("triple " << (triple == Triple::point ? "point" : "distance") << ": " << failures
                   << " failing runs of " << kRuns);
    CHECK(failures <= binomial_limit());
  }
}

TEST_CASE("Lemma 5.3: PIE-k keeps the true k nearest with probability at least 1 - beta0",
          "[coordinator][elimination][statistical]") {
  CGP_SEEDED(5003);
  // Many users at nearly the same distance: the k-th neighbour is contested.
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> angle(0, 2 * M_PI), radius(90, 130);
  const std::size_t n = 400, k = 5;
  std::vector<double> points(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    const double a = angle(rng), r = i < 40 ? radius(rng) - 60 : radius(rng) + 200;
    points[2 * i] = r * std::cos(a);
    points[2 * i + 1] = r * std::sin(a);
  }
  const double p[2] = {0, 0};
  KnnOracle oracle(points, 2);
  const auto truth = oracle.nearest(p, k);
  for (Triple triple : {Triple::point, Triple::distance}) {
    int failures = 0;
    for (int run = 0; run < kRuns; ++run) {
      auto fleet = test::make_fleet(points, 2, 1.0, seed + static_cast<std::uint64_t>(run), 1);
      BudgetMirror mirror(n, fleet.initial_budget());
      auto rho = test::charge_everyone(1e-2);  // σ ≈ 7 m per full release
      EliminationSetup setup;
      setup.query_id = "lemma-5.3";
      setup.phi = {StatisticKind::distance_to_point, p, nullptr};
      setup.triple = triple;
      setup.rounds = 8;
      setup.beta0 = kBeta0;
      auto result = eliminate_k(fleet, mirror, setup, rho, k);
      REQUIRE(result.has_value());
      // G_j are nested, so J* ⊆ G_ĵ means J* ⊆ every G_j.
      std::vector<UserId> kept = result->remaining;
      std::sort(kept.begin(), kept.end());
      bool lost = false;
      for (UserId u : truth) lost |= !std::binary_search(kept.begin(), kept.end(), u);
      failures += lost;
    }
    INFO("triple " << (triple == Triple::point ? "point" : "distance") << ": " << failures
                   << " runs lost a neighbour of " << kRuns);
    CHECK(failures <= binomial_limit());
  }
}

TEST_CASE("elimination saves: users decided early keep the rest of their rho",
          "[coordinator][elimination]") {
  CGP_SEEDED(5004);
  auto points = test::uniform_square(2000, 10000, seed);
  auto fleet = test::make_fleet(points, 2, 1.0, seed);
  BudgetMirror mirror(fleet.size(), fleet.initial_budget());
  auto rho = test::charge_everyone(1e-3);
  double lo[2] = {4000, 4000}, hi[2] = {5000, 5000};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  EliminationSetup setup;
  setup.query_id = "savings";
  setup.phi = {StatisticKind::signed_distance_to_region, {}, &range};
  setup.rounds = 8;
  auto result = eliminate_noninteractive(fleet, mirror, setup, rho, 0, 0);
  REQUIRE(result.has_value());
  std::size_t early = 0;
  for (UserId u = 0; u < fleet.size(); ++u) {
    CHECK(result->report.charged[u].value() <= 1e-3);
    if (result->report.charged[u].value() < 1e-3 / 4) ++early;
  }
  CHECK(early > fleet.size() / 2);
  CHECK(result->s0.size() + result->s1.size() + result->remaining.size() == fleet.size());
}

namespace {

// The simulated fleet as a fleet that takes whole rounds only (as a network fleet does).
class WholeRounds final : public Fleet {
 public:
  explicit WholeRounds(SimulatedFleet& inner) : inner_(inner) {}
  std::size_t size() const noexcept override { return inner_.size(); }
  std::size_t dimension() const noexcept override { return inner_.dimension(); }
  double initial_budget() const noexcept override { return inner_.initial_budget(); }
  void ask(const RoundRequest& request, RoundReplies& replies) override {
    inner_.ask(request, replies);
  }

 private:
  SimulatedFleet& inner_;
};

}  // namespace

// A fleet that takes chunks (asked by parallel workers) and one asked a whole round per call
// give the same result to the last bit and list order, for PIE-NI, PIE-k and the single
// release, with per-user caps, devices that refuse (spent elsewhere) and users the mirror
// refuses (spent in its view).
TEST_CASE("chunked rounds give exactly what whole rounds give", "[coordinator][elimination]") {
  CGP_SEEDED(5010);
  const auto points = test::uniform_square(5000, 10000, seed);
  std::mt19937_64 rng(seed);
  std::vector<UserId> users(points.size() / 2);
  std::vector<Charge> caps;
  for (UserId u = 0; u < users.size(); ++u) {
    users[u] = u;
    caps.push_back(Charge{1e-4 * (1 + static_cast<double>(rng() % 4))});
  }
  const auto charges = UserCharges::per_user(users, caps);
  double lo[2] = {3000, 3000}, hi[2] = {7000, 7000};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  const double p[2] = {5000, 5000};
  auto run = [&](unsigned threads, bool chunked, int kind) {
    auto fleet = test::make_fleet(points, 2, 4e-4, seed, threads);
    BudgetMirror mirror(fleet.size(), fleet.initial_budget());
    // Devices 0, 7, 14, ... spent most of their budget elsewhere: they refuse.
    RoundRequest elsewhere;
    elsewhere.query_id = "elsewhere";
    std::vector<UserId> spenders;
    for (UserId u = 0; u < fleet.size(); u += 7) spenders.push_back(u);
    const std::vector<double> big(spenders.size(), 3.9e-4 / 1.003);
    elsewhere.users = spenders;
    elsewhere.rho = big;
    RoundReplies ignored;
    fleet.ask(elsewhere, ignored);
    // The mirror knows users 3, 14, 25, ... have little left: it does not ask them.
    for (UserId u = 3; u < fleet.size(); u += 11) mirror.restore(u, 1e-9);
    WholeRounds whole(fleet);
    Fleet& used = chunked ? static_cast<Fleet&>(fleet) : whole;
    EliminationSetup setup;
    setup.query_id = "q";
    setup.rounds = 4;
    if (kind == 0) {
      setup.phi = {StatisticKind::signed_distance_to_region, {}, &range};
      return *eliminate_noninteractive(used, mirror, setup, charges, 0, 0);
    }
    setup.phi = {StatisticKind::distance_to_point, p, nullptr};
    if (kind == 1) return *eliminate_k(used, mirror, setup, charges, 10);
    setup.triple = Triple::point;
    return *release_once(used, mirror, setup, charges);
  };
  for (int kind = 0; kind < 3; ++kind) {
    INFO("kind " << kind);
    const auto whole = run(1, false, kind);
    REQUIRE_FALSE(whole.report.refused.empty());
    for (unsigned threads : {1u, 2u}) {
      INFO("threads " << threads);
      test::check_same_result(run(threads, true, kind), whole);
    }
  }
}
