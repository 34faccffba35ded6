// The simulated fleet's folded rounds (Fleet::ask_folded: the device's rules and the engine's
// reading in one pass) against the engine's own path over the same fleet (ask(), then every
// reply read): the same results bit for bit, for every query kind, ρ uniform or per user, with
// refusals, sticky halts, users the mirror stops asking and releases kept or forgotten.
#include <catch2/catch.hpp>
#include <optional>
#include <random>
#include <string>

#include "cgp/coordinator/elimination.hpp"
#include "cgp/simulation/simulated_fleet.hpp"
#include "fleet_fixtures.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using namespace cgp::simulation;

namespace {

// The same fleet through the engine's own path: it does not fold (the default ask_folded).
class Unfolded final : public Fleet {
 public:
  explicit Unfolded(SimulatedFleet& fleet) : fleet_(fleet) {}
  std::size_t size() const noexcept override { return fleet_.size(); }
  std::size_t dimension() const noexcept override { return fleet_.dimension(); }
  double initial_budget() const noexcept override { return fleet_.initial_budget(); }
  void ask(const RoundRequest& request, RoundReplies& replies) override {
    fleet_.ask(request, replies);
  }
  unsigned concurrency() const noexcept override { return fleet_.concurrency(); }

 private:
  SimulatedFleet& fleet_;
};

enum class Kind { noninteractive, k_nearest, once };

struct Case {
  Kind kind = Kind::noninteractive;
  Triple triple = Triple::distance;
  StatisticKind statistic = StatisticKind::distance_to_point;
  bool per_user = false;     // Alg. 3's per-user caps, or one cap for everyone
  bool latest_only = false;  // latest_release_only
  bool sticky = false;       // the devices' filters halt for good on a refusal
  unsigned threads = 1;
};

}  // namespace

TEST_CASE("folded rounds give the engine's own results bit for bit", "[simulation][fold]") {
  CGP_SEEDED(7301);
  const std::size_t n = 3000;  // three chunks of the engine, batches of the fleet
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> coordinate(-2000, 2000);
  std::vector<double> points(2 * n);
  for (double& x : points) x = coordinate(rng);
  const double center[2] = {100, -50};
  double lo[2] = {-500, -500}, hi[2] = {700, 900};
  const geometry::Region box = *geometry::Box::create(lo, hi);

  std::vector<Case> cases;
  for (unsigned threads : {1u, 2u})
    for (bool per_user : {false, true}) {
      cases.push_back({Kind::noninteractive, Triple::distance, StatisticKind::distance_to_point,
                       per_user, false, false, threads});
      cases.push_back({Kind::noninteractive, Triple::point,
                       StatisticKind::signed_distance_to_region, per_user, false, true, threads});
      cases.push_back({Kind::noninteractive, Triple::distance,
                       StatisticKind::signed_distance_to_region, per_user, true, false, threads});
      cases.push_back({Kind::k_nearest, Triple::distance, StatisticKind::distance_to_point,
                       per_user, false, false, threads});
      cases.push_back({Kind::k_nearest, Triple::point, StatisticKind::distance_to_point, per_user,
                       false, true, threads});
      cases.push_back({Kind::once, Triple::point, StatisticKind::distance_to_point, per_user, false,
                       false, threads});
    }

  for (const Case& c : cases) {
    INFO("kind " << static_cast<int>(c.kind) << ", point triple " << (c.triple == Triple::point)
                 << ", per-user caps " << c.per_user << ", latest only " << c.latest_only
                 << ", sticky " << c.sticky << ", threads " << c.threads);
    const double budget = 1e-3;
    auto config = DeviceConfig::cgp(budget, c.sticky);
    REQUIRE(config.has_value());
    auto folded = SimulatedFleet::create(*config, points, 2, seed, c.threads);
    auto plain = SimulatedFleet::create(*config, points, 2, seed, c.threads);
    REQUIRE(folded.has_value());
    REQUIRE(plain.has_value());
    Unfolded unfolded(*plain);
    BudgetMirror mirror_a(n, budget), mirror_b(n, budget);
    // Some users have spent part of their budget before (the devices refuse them part way),
    // and the mirror knows of some of it (it does not ask them at all).
    std::uniform_real_distribution<double> unit(0, 1);
    std::vector<UserId> users;
    std::vector<Charge> caps;
    for (UserId u = 0; u < n; ++u) {
      users.push_back(u);
      caps.push_back(Charge{budget * (0.05 + 0.5 * unit(rng))});
    }
    const UserCharges charges = c.per_user ? UserCharges::per_user(users, caps)
                                           : UserCharges::everyone(Charge{budget * 0.4});
    // Per-user caps change from query to query (as Alg. 3's do): a class of ρ of one query is
    // another ρ in the next, so plans a fleet kept by class must not carry over.
    const auto charges_of = [&](int query) {
      if (!c.per_user || query < 2) return charges;
      std::vector<Charge> scaled(caps);
      for (std::size_t k = 0; k < scaled.size(); ++k)
        scaled[k] = Charge{caps[k].value() * (1 - 0.1 * query) * (k % 3 == 0 ? 0.5 : 1)};
      return UserCharges::per_user(users, scaled);
    };
    // The first query spends on the devices behind the mirrors' backs (mirrors of its own),
    // so the next ones meet device refusals (and sticky halts); by the last, the mirrors know
    // that some users cannot pay and stop asking them.
    BudgetMirror unknown_a(n, budget), unknown_b(n, budget);
    const auto setup_of = [&](int query) {
      EliminationSetup setup;
      setup.query_id = "fold-" + std::to_string(query);
      setup.triple = c.triple;
      setup.phi.statistic = c.statistic;
      setup.phi.point = center;
      setup.phi.region = &box;
      setup.rounds = 4;
      setup.latest_release_only = c.latest_only;
      return setup;
    };
    // And the mirrors know less than some devices report (a restarted coordinator's saved
    // values): for those users what is left after an answer depends on the mirror, not only on
    // the device's report — users in both states side by side in every batch.
    for (UserId u = 3; u < n; u += 7) {
      mirror_a.restore(u, budget * 0.5);
      mirror_b.restore(u, budget * 0.5);
    }
    // A request larger than the capacity first, to every fifth user, past mirrors that think
    // the budget 4× larger: refused by every device, and a sticky filter halts with nothing
    // spent — a halted user beside unhalted ones in the same state otherwise.
    {
      std::vector<UserId> over;
      for (UserId u = 1; u < n; u += 5) over.push_back(u);
      const std::vector<Charge> too_much(over.size(), Charge{budget * 2});
      const UserCharges refused_all = UserCharges::per_user(over, too_much);
      BudgetMirror lax_a(n, budget * 4), lax_b(n, budget * 4);
      EliminationSetup setup = setup_of(99);
      REQUIRE(release_once(*folded, lax_a, setup, refused_all).has_value());
      REQUIRE(release_once(unfolded, lax_b, setup, refused_all).has_value());
    }
    std::size_t refused = 0, asked = 0;
    for (int query = 0; query < 4; ++query) {
      const EliminationSetup setup = setup_of(query);
      const UserCharges query_charges = charges_of(query);
      BudgetMirror& ma = query == 0 ? unknown_a : mirror_a;
      BudgetMirror& mb = query == 0 ? unknown_b : mirror_b;
      std::optional<Expected<EliminationResult>> a, b;
      switch (c.kind) {
        case Kind::noninteractive:
          a = eliminate_noninteractive(*folded, ma, setup, query_charges, 0, 400);
          b = eliminate_noninteractive(unfolded, mb, setup, query_charges, 0, 400);
          break;
        case Kind::k_nearest:
          a = eliminate_k(*folded, ma, setup, query_charges, 25);
          b = eliminate_k(unfolded, mb, setup, query_charges, 25);
          break;
        case Kind::once:
          a = release_once(*folded, ma, setup, query_charges);
          b = release_once(unfolded, mb, setup, query_charges);
          break;
      }
      REQUIRE(a->has_value());
      REQUIRE(b->has_value());
      test::check_same_result(**a, **b);
      refused += (*a)->report.refused.size();
      for (std::size_t count : (*a)->report.asked_per_round) asked += count;
      for (UserId u = 0; u < n; ++u) {
        REQUIRE(folded->spent(u) == plain->spent(u));
        REQUIRE(ma.remaining(u) == mb.remaining(u));
      }
    }
    // A new capacity changes the plan of the same ρ (the grid follows σ_cap): plans the folded
    // fleet kept for its users (Alg. 3's distinct ρ) must not outlive it.
    if (c.kind == Kind::noninteractive) {
      auto larger = DeviceConfig::cgp(budget * 1024, c.sticky);
      REQUIRE(larger.has_value());
      folded->reset(seed + 1, *larger);
      plain->reset(seed + 1, *larger);
      BudgetMirror ra(n, budget * 1024), rb(n, budget * 1024);
      const EliminationSetup setup = setup_of(0);  // the same ρ as the first query
      auto a = eliminate_noninteractive(*folded, ra, setup, charges, 0, 400);
      auto b = eliminate_noninteractive(unfolded, rb, setup, charges, 0, 400);
      REQUIRE(a.has_value());
      REQUIRE(b.has_value());
      test::check_same_result(*a, *b);
      for (UserId u = 0; u < n; ++u) REQUIRE(folded->spent(u) == plain->spent(u));
    }
    CHECK(folded->values_released() == plain->values_released());
    // The comparison means something only if it met refusals, and answers.
    INFO(refused << " refused or not asked, " << asked << " asked");
    CHECK(refused > 0);
    CHECK(asked > n);
  }
}
