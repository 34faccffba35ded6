// The experiments' PrivSav (sharded_truth.hpp: global_saving), which counts users by charge and
// works out each distinct charge's saving once, against the saving of each user added one at a
// time to an exact sum: the same bits, with few distinct charges (a table that never evicts),
// thousands (one that evicts at every other user) and a list of users.
#include <catch2/catch.hpp>
#include <random>

#include "cgp/coordinator/exact_sum.hpp"
#include "sharded_truth.hpp"
#include "support/seed.hpp"

using namespace cgp;
using coordinator::Charge;
using coordinator::UserId;

namespace {

double saving_one_at_a_time(std::span<const Charge> charged, double rho,
                            std::span<const UserId> users) {
  coordinator::ExactSum kept;
  const auto add = [&](UserId u) { kept.add(std::max(0.0, rho - charged[u].value()) / rho); };
  if (users.empty()) {
    for (std::size_t u = 0; u < charged.size(); ++u) add(static_cast<UserId>(u));
    return kept.value() / static_cast<double>(charged.size());
  }
  for (UserId u : users) add(u);
  return kept.value() / static_cast<double>(users.size());
}

}  // namespace

TEST_CASE("PrivSav counted by charge is the users' saving added one at a time",
          "[experiments][exact_sum]") {
  CGP_SEEDED(3107);
  std::mt19937_64 rng(seed);
  const double rho = 1e-3;
  const std::size_t n = 20000;
  const coordinator::Shard whole{0, n, nullptr};
  for (std::size_t distinct : {1u, 5u, 64u, 5000u, 20000u}) {
    INFO(distinct << " distinct charges");
    // A round's share times the rounds answered (as range PM1's charges), or any amount up to
    // and past the cap (as Alg. 3's): the savings of 0 and of more than the cap included.
    std::vector<double> amounts(distinct);
    for (std::size_t k = 0; k < distinct; ++k)
      amounts[k] = distinct <= 5 ? rho * static_cast<double>(k) / 4
                                 : rho * 1.1 * std::uniform_real_distribution<double>(0, 1)(rng);
    std::vector<Charge> charged(n);
    for (Charge& c : charged) c = Charge{amounts[rng() % distinct]};
    std::vector<UserId> some;
    for (UserId u = 0; u < n; ++u)
      if (rng() % 3 != 0) some.push_back(u);
    const double all = experiments::global_saving(whole, charged, rho);
    CHECK(std::bit_cast<std::uint64_t>(all) ==
          std::bit_cast<std::uint64_t>(saving_one_at_a_time(charged, rho, {})));
    const double listed = experiments::global_saving(whole, charged, rho, some);
    CHECK(std::bit_cast<std::uint64_t>(listed) ==
          std::bit_cast<std::uint64_t>(saving_one_at_a_time(charged, rho, some)));
    CHECK(all > 0);
  }
}
