// Private iterative elimination (paper §5.2): PIE-NI (Alg. 4) and PIE-k (Alg. 5), with the valid
// triples of Corollaries 6.1 (point privatization) and 6.2 (distance privatization).
//
// Each user's charge cap ρ_i is split into c parts; in round j the users still in G_{j−1} release
// with r_{i,j}. Users decided early keep the rest of ρ_i: that is the privacy saving.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/privacy/budget_split.hpp"
#include "cgp/coordinator/budget_mirror.hpp"
#include "cgp/coordinator/charges.hpp"
#include "cgp/coordinator/fleet.hpp"
#include "cgp/coordinator/shard.hpp"

namespace cgp::coordinator {

// Which valid triple (M, g, h) estimates φ.
enum class Triple {
  point,     // Cor. 6.1: devices release x; φ̄ = φ(x̄); h = λ(d, β)/√(2ρ̄)
  distance,  // Cor. 6.2: devices release φ(x); φ̄ = ȳ; h = λ(1, β)/√(2ρ̄)
};

// φ: the 1-Lipschitz usefulness of a user for the query — Proj_Γ, len_p, or (location) the
// value of a 1-D component itself.
struct Usefulness {
  StatisticKind statistic = StatisticKind::distance_to_point;
  std::span<const double> point;             // len_p
  const geometry::Region* region = nullptr;  // Proj_Γ
  double evaluate(std::span<const double> x) const noexcept;
  // evaluate() of `count` points of dimension d (row-major) into out: the same values, one
  // dispatch per call (geometry's batch functions).
  void evaluate(const double* points, std::size_t count, std::size_t d, double* out) const noexcept;
};

struct EliminationSetup {
  std::string query_id;
  std::string component_id = "location";
  Usefulness phi;
  Triple triple = Triple::distance;
  std::size_t rounds = 4;  // c
  privacy::SplitSchedule split = privacy::SplitSchedule::even;
  // When set, replaces (rounds, split): the share of each user's cap asked in each round (each
  // > 0, summing to ≤ 1), e.g. privacy::geometric_split(1, g, c) for noise reduction.
  std::vector<double> fractions;
  double beta0 = 0.025;  // β₀ = β/4 (Remark 6)
  // A baseline, not a method: each round's estimate and radius from that round's release alone
  // (no running mean) — "doubling without averaging" (seed 001 §7.1). Users still pay every
  // release.
  bool latest_release_only = false;
  // The fleet is one shard of a bigger one (shard.hpp): radii use the group over every shard,
  // PIE-k the k-th upper end over every shard; ids in the result are the shard's (local).
  Shard shard;
};

// What a query did, for its result: rounds, eliminations, charges, and who did not take part.
// Sharded (EliminationSetup::shard): the counts per round are over every shard; the per-user
// fields are this shard's users, by local id (shard.hpp: global_id).
struct QueryReport {
  std::size_t rounds_used = 0;
  std::vector<std::size_t> asked_per_round;
  std::vector<std::size_t> eliminated_per_round;
  std::vector<Charge> charged;     // indexed by user id: what this query cost each user
  std::vector<UserId> refused;     // refused by the device, or not asked: mirror exhausted
  std::vector<UserId> rejected;    // the device rejected the request
  std::vector<UserId> unanswered;  // no answer
  // Of the unanswered, those the request never reached (check-in fleets: the device did not
  // check in within the round's window); charged nothing.
  std::vector<UserId> not_reached;
};

// Users' running ρ-weighted means of their releases (Fact 6.2), indexed by user id.
struct Estimates {
  std::size_t dimension = 0;    // of one release
  std::vector<double> sum;      // users × dimension: Σ_s r_s·v_s
  std::vector<double> rho_bar;  // users: Σ_s r_s
  // Starts n users with no release.
  void reset(std::size_t users, std::size_t release_dimension);
  // A release v (dimension values) made with ρ = r > 0.
  void add(UserId user, const double* v, double r) noexcept {
    double* s = sum.data() + static_cast<std::size_t>(user) * dimension;
    for (std::size_t t = 0; t < dimension; ++t) s[t] += r * v[t];
    rho_bar[user] += r;
  }
  // add() of a 1-D release (dimension 1), for loops that know it.
  void add_1d(UserId user, double v, double r) noexcept {
    sum[user] += r * v;
    rho_bar[user] += r;
  }
  // Drops the user's releases so far (latest_release_only).
  void forget(UserId user) noexcept {
    double* s = sum.data() + static_cast<std::size_t>(user) * dimension;
    for (std::size_t t = 0; t < dimension; ++t) s[t] = 0;
    rho_bar[user] = 0;
  }
  // (1/ρ̄) Σ r_s v_s into out[0 .. dimension); ρ̄ > 0. Inline: the engine's batch folds call
  // it once per answer.
  void mean(UserId user, double* out) const noexcept {
    const double* s = sum.data() + static_cast<std::size_t>(user) * dimension;
    const double total = rho_bar[user];
    for (std::size_t t = 0; t < dimension; ++t) out[t] = s[t] / total;
  }
};

struct EliminationResult {
  std::vector<UserId> s0, s1;     // PIE-NI: φ > ν_high / φ < ν_low with probability 1 − β₀
  std::vector<UserId> remaining;  // G_ĵ: undecided (PIE-NI) or the kNN candidates (PIE-k)
  Estimates estimates;
  QueryReport report;
  // eliminate_regions: by user id, the confidence radius of the user's last estimate (0 before
  // its first answer). Lemma 5.2's event covers every (user, round) at once, so a user's last
  // interval stays valid after it stops.
  std::vector<double> radius;
};

// PIE-NI (Alg. 4) over the users of `charges` (G₀), each charged at most its cap over all
// rounds. ν_low may be −∞ and ν_high +∞.
Expected<EliminationResult> eliminate_noninteractive(Fleet& fleet, BudgetMirror& mirror,
                                                     const EliminationSetup& setup,
                                                     const UserCharges& charges, double nu_low,
                                                     double nu_high);

// PIE-NI that may stop before its last round: after each round, stop(result, G_j) sees S₁, S₀,
// the estimates and the report so far; true ends the query. The radii keep the union bound over
// all the planned rounds, so Lemma 5.2 holds at whichever round a stopping rule on the released
// values ends it (accuracy_first.md). Sharded: stop must return the same on every shard.
using StopRule = std::function<bool(const EliminationResult&, std::span<const UserId> group)>;
Expected<EliminationResult> eliminate_noninteractive(Fleet& fleet, BudgetMirror& mirror,
                                                     const EliminationSetup& setup,
                                                     const UserCharges& charges, double nu_low,
                                                     double nu_high, const StopRule& stop);

// The race of top-k regions (accuracy_first.hpp, top_regions): point releases (Cor. 6.1), and
// after each round a user stays in the group while its signed distance to some region still in
// the race (competing[r] != 0) is within its radius; otherwise it stops paying (s0). `competing`
// may change between rounds (from `stop`, which sees every round's result). Not sharded.
Expected<EliminationResult> eliminate_regions(Fleet& fleet, BudgetMirror& mirror,
                                              const EliminationSetup& setup,
                                              const UserCharges& charges,
                                              std::span<const geometry::Region> regions,
                                              const std::vector<char>& competing,
                                              const StopRule& stop);

// PIE-k (Alg. 5): keeps every user whose confidence interval reaches below the k-th smallest
// upper end; stops when k remain or after c rounds.
Expected<EliminationResult> eliminate_k(Fleet& fleet, BudgetMirror& mirror,
                                        const EliminationSetup& setup, const UserCharges& charges,
                                        std::size_t k);

// The baselines' single release: every user of `charges` releases the triple's statistic with
// its whole cap (one round, no elimination). remaining = the users that answered.
Expected<EliminationResult> release_once(Fleet& fleet, BudgetMirror& mirror,
                                         const EliminationSetup& setup, const UserCharges& charges);

}  // namespace cgp::coordinator
