// Spreading each user's budget over many queries (paper §5.1, Alg. 3): users a query did not
// need keep their budget, and later queries get it.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/coordinator/accuracy_first.hpp"
#include "cgp/coordinator/budget_mirror.hpp"
#include "cgp/coordinator/queries.hpp"

namespace cgp::coordinator {

class AdaptiveBudget {
 public:
  // Alg. 3 for m queries known in advance: query l gives user i
  //   r_i = γ_l·(B_i − (m − l + 1)·B/m) + B/m,  γ_l = 3/4 + (l − 1)/(m − 1)·1/4,
  // capped to [0, B_i]. B is the initial budget, B_i what the mirror says is left.
  static Expected<AdaptiveBudget> fixed(double budget, std::size_t queries);
  // m not known in advance: plan B/H per query over a horizon of H queries and give 3/4 of the
  // savings so far at once: r_i = min(B_i, B/H + 3/4·max(0, B_i − B·max(0, 1 − (l − 1)/H))).
  // After H queries users keep answering while their budget lasts.
  static Expected<AdaptiveBudget> open_ended(double budget, std::size_t horizon);

  // What each user may be charged for query l (1-based), from the mirror.
  std::vector<double> allocate(std::size_t query, const BudgetMirror& mirror) const;

  // Query l as the engine runs it: the users it asks, each with its allocation as the cap. The
  // one place that turns an allocation into a query, for the library and the service alike.
  // `candidates`: the users the query is over (empty = all).
  struct Ask {
    UserCharges charges;            // users with a positive allocation (none: nobody to ask)
    std::vector<UserId> exhausted;  // nothing left to allocate: not asked, reported as refused
  };
  Ask ask(std::size_t query, const BudgetMirror& mirror,
          std::span<const UserId> candidates = {}) const;
  std::size_t queries() const noexcept { return queries_; }  // m, or H when open-ended
  bool is_open_ended() const noexcept { return open_ended_; }

 private:
  double budget_ = 0;
  std::size_t queries_ = 1;
  bool open_ended_ = false;
};

// Alg. 3 over range counts: query l counts ranges[l−1] over `users` (empty = all), each user
// charged at most its allocation from `budget`; users with nothing left are not asked.
Expected<std::vector<CountResult>> adaptive_range_counts(Fleet& fleet, BudgetMirror& mirror,
                                                         const AdaptiveBudget& budget,
                                                         std::span<const geometry::Region> ranges,
                                                         const QueryOptions& options,
                                                         std::span<const UserId> users = {});

// Alg. 3 over accuracy-first range counts: query l certifies ranges[l−1] to `target` with each
// user's allocation as its cap, so a query that certifies early leaves more for the next ones.
// Users with nothing left are not asked (reported as refused).
Expected<std::vector<CertifiedEstimate>> adaptive_range_counts_to_accuracy(
    Fleet& fleet, BudgetMirror& mirror, const AdaptiveBudget& budget,
    std::span<const geometry::Region> ranges, const AccuracyTarget& target,
    const AccuracyFirstOptions& options, std::span<const UserId> users = {});

}  // namespace cgp::coordinator
