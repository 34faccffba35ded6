// Accuracy-first range counts and KDE: "certify |Ĉ − C| ≤ α·C (or ≤ k) with probability ≥ 1 − β₀,
// spending at most each user's cap" — users pay only for the precision the answer needs.
//
// PIE-NI (Alg. 4) over a geometric split of each cap (privacy::geometric_split: early rounds
// cheap, each later one g times dearer) is a noise reduction: a user's running mean after round j
// is as precise as one release at ρ̄_j, and the device's filter charges ρ̄_j, not more (seed 001's
// idea; accuracy_first.md). After every round the engine certifies an interval for the answer
// from Lemma 5.2 and stops once that interval pins the answer to the target.
#pragma once

#include <span>
#include <string>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/region.hpp"
#include "cgp/coordinator/budget_mirror.hpp"
#include "cgp/coordinator/charges.hpp"
#include "cgp/coordinator/elimination.hpp"
#include "cgp/coordinator/fleet.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/coordinator/shard.hpp"

namespace cgp::coordinator {

// |Ĉ − C| ≤ max(relative·C, absolute): set either or both (0 = not used); relative in [0, 1),
// absolute ≥ 0 (users for counts, density for KDE), at least one > 0.
struct AccuracyTarget {
  double relative = 0.1;
  double absolute = 0;
};

struct AccuracyFirstOptions {
  Method method = Method::PM1;  // PM0 (point releases) or PM1 (distance releases)
  std::size_t max_rounds = 16;  // c: the union bound of the radii is over all of them
  double growth = 2;            // g > 1: round j asks first·g^(j−1) of the cap
  // Share of each user's cap in round 1; 0: (g − 1)/(g^c − 1), so that c rounds spend the cap.
  double first = 0;
  double beta = 0.1;  // β₀ = β/4, as QueryOptions
  bool shift = true;  // PM1 ranges: the Appendix B shift in the final estimate
  // The baseline "doubling without averaging" (seed 001 §7.1): every estimate and interval from
  // the latest release alone. For comparisons; it pays the same and certifies later.
  bool latest_release_only = false;
  // Users the answer is about who are not asked (Alg. 3: nothing left to allocate): they may be
  // anywhere, so the certified interval includes them (ranges: in the upper end; KDE: in n and
  // with a kernel in [0, 1]).
  std::size_t users_not_asked = 0;
  std::string query_id = "query";
  std::string component_id = "location";
  Shard shard;  // as QueryOptions::shard
};

// The answer and the interval certified for it with probability ≥ 1 − β₀. certified: every
// value in [lower, upper] is within the target of `estimate` (then `estimate` is the PM
// post-processing moved, if needed, into the window that certifies it); otherwise the query
// reached its rounds or caps first and [lower, upper] is what it certified.
struct CertifiedEstimate {
  double estimate = 0;
  double lower = 0, upper = 0;
  bool certified = false;
  QueryReport report;
};

// Range count (Alg. 6): C ∈ [|S₁|, |S₁| + |G_j| + |users out of the query|] after round j.
Expected<CertifiedEstimate> range_count_to_accuracy(Fleet& fleet, BudgetMirror& mirror,
                                                    const geometry::Region& range,
                                                    const UserCharges& charges,
                                                    const AccuracyTarget& target,
                                                    const AccuracyFirstOptions& options);

// Gaussian KDE (Alg. 7): each undecided user's kernel bounded by its confidence interval,
// e^-18 for an eliminated one (Cor. 6.4), [0, 1] for a user out of the query; divided by n.
Expected<CertifiedEstimate> kde_to_accuracy(Fleet& fleet, BudgetMirror& mirror,
                                            std::span<const double> p, double bandwidth,
                                            const UserCharges& charges,
                                            const AccuracyTarget& target,
                                            const AccuracyFirstOptions& options);

// The shares of each user's cap asked per round (privacy::geometric_split of options), with the
// first share raised, where needed, so that the smallest cap's first round is one a device of
// budget `device_budget` answers (≥ 1.01·privacy::min_rho): a schedule whose early rounds every
// device would reject would drop every user from the query.
Expected<std::vector<double>> accuracy_schedule(const AccuracyFirstOptions& options,
                                                double smallest_cap, double device_budget);

// The values an estimate may take for every answer in [lower, upper] to be within `target` of
// it: [upper − tol(upper), lower + tol(lower)], tol(C) = max(relative·C, absolute); empty
// (first > second) when the interval is too wide to certify.
std::pair<double, double> certifying_window(double lower, double upper,
                                            const AccuracyTarget& target) noexcept;

}  // namespace cgp::coordinator
