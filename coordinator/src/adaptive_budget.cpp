#include "cgp/coordinator/adaptive_budget.hpp"

#include <algorithm>
#include <string>

#include "cgp/common/validate.hpp"

namespace cgp::coordinator {

Expected<AdaptiveBudget> AdaptiveBudget::fixed(double budget, std::size_t queries) {
  CGP_RETURN_IF_ERROR(require_finite_positive("budget", budget));
  CGP_RETURN_IF_ERROR(require_count_in("m", queries, 1, 1000000));
  AdaptiveBudget b;
  b.budget_ = budget;
  b.queries_ = queries;
  return b;
}

Expected<AdaptiveBudget> AdaptiveBudget::open_ended(double budget, std::size_t horizon) {
  CGP_RETURN_IF_ERROR(require_finite_positive("budget", budget));
  CGP_RETURN_IF_ERROR(require_count_in("horizon", horizon, 1, 1000000));
  AdaptiveBudget b;
  b.budget_ = budget;
  b.queries_ = horizon;
  b.open_ended_ = true;
  return b;
}

std::vector<double> AdaptiveBudget::allocate(std::size_t query, const BudgetMirror& mirror) const {
  const double m = static_cast<double>(queries_);
  const double l = static_cast<double>(std::max<std::size_t>(query, 1));
  const double share = budget_ / m;
  std::vector<double> r(mirror.size());
  const double* const remaining = mirror.remaining_data();
  // What depends on the query alone, once (the same expressions, so the same bits).
  if (open_ended_) {
    const double planned_left = budget_ * std::max(0.0, 1 - (l - 1) / m);
    for (std::size_t i = 0; i < r.size(); ++i) {
      const double left = remaining[i];
      r[i] = std::clamp(share + 0.75 * std::max(0.0, left - planned_left), 0.0, left);
    }
  } else {
    const double gamma = queries_ > 1 ? 0.75 + (l - 1) / (m - 1) * 0.25 : 1.0;
    const double held_back = (m - l + 1) * share;
    for (std::size_t i = 0; i < r.size(); ++i) {
      const double left = remaining[i];
      r[i] = std::clamp(gamma * (left - held_back) + share, 0.0, left);
    }
  }
  return r;
}

AdaptiveBudget::Ask AdaptiveBudget::ask(std::size_t query, const BudgetMirror& mirror,
                                        std::span<const UserId> candidates) const {
  const auto allocation = allocate(query, mirror);
  // Most users still have budget: each is written in place and kept if its allocation is
  // positive (no regrowth, no push per user).
  const std::size_t listed = candidates.empty() ? allocation.size() : candidates.size();
  std::vector<UserId> users(listed);
  std::vector<Charge> caps(listed);
  std::size_t kept = 0;
  Ask out;
  auto consider = [&](UserId u) {
    // A user the mirror shows spent (a device that halted, or a restart that read its ledger's
    // total) is left out: a cap of 0 would make the whole query invalid.
    const bool positive = allocation[u] > 0;
    users[kept] = u;
    caps[kept] = Charge{allocation[u]};
    kept += positive;
    if (!positive) out.exhausted.push_back(u);
  };
  if (candidates.empty()) {
    for (std::size_t u = 0; u < allocation.size(); ++u) consider(static_cast<UserId>(u));
  } else {
    for (auto u : candidates)
      if (u < allocation.size()) consider(u);
  }
  users.resize(kept);
  caps.resize(kept);
  out.charges = UserCharges::per_user(std::move(users), std::move(caps));
  return out;
}

Expected<std::vector<CountResult>> adaptive_range_counts(Fleet& fleet, BudgetMirror& mirror,
                                                         const AdaptiveBudget& budget,
                                                         std::span<const geometry::Region> ranges,
                                                         const QueryOptions& options,
                                                         std::span<const UserId> users) {
  Status valid;
  for (UserId u : users)
    if (u >= fleet.size() || u >= mirror.size()) {
      valid = make_error(ErrorCode::out_of_range, "users",
                         "users holds id " + std::to_string(u) + ", not in the fleet of " +
                             std::to_string(fleet.size()));
      break;
    }
  CGP_RETURN_IF_ERROR(agree_over_shards(options.shard, std::move(valid)));
  std::vector<CountResult> results;
  results.reserve(ranges.size());
  for (std::size_t l = 1; l <= ranges.size(); ++l) {
    const auto ask = budget.ask(l, mirror, users);
    QueryOptions query = options;
    query.query_id = options.query_id + "-" + std::to_string(l);
    CountResult result;
    // Sharded: a shard with nobody to ask still takes part unless no shard has anyone.
    if (sum_over_shards(options.shard, ask.charges.listed().size()) == 0) {
      result.report.charged.assign(fleet.size(), Charge{});
    } else {
      CGP_ASSIGN_OR_RETURN(auto counted,
                           range_count(fleet, mirror, ranges[l - 1], ask.charges, query));
      result = std::move(counted);
    }
    result.report.refused.insert(result.report.refused.end(), ask.exhausted.begin(),
                                 ask.exhausted.end());
    results.push_back(std::move(result));
  }
  return results;
}

Expected<std::vector<CertifiedEstimate>> adaptive_range_counts_to_accuracy(
    Fleet& fleet, BudgetMirror& mirror, const AdaptiveBudget& budget,
    std::span<const geometry::Region> ranges, const AccuracyTarget& target,
    const AccuracyFirstOptions& options, std::span<const UserId> users) {
  if (options.shard.sharded())
    return make_error(ErrorCode::invalid_argument, "shard",
                      "accuracy-first sequences run unsharded (not yet over shards)");
  for (UserId u : users)
    if (u >= fleet.size() || u >= mirror.size())
      return make_error(ErrorCode::out_of_range, "users",
                        "users holds id " + std::to_string(u) + ", not in the fleet of " +
                            std::to_string(fleet.size()));
  std::vector<CertifiedEstimate> results;
  results.reserve(ranges.size());
  const double n = static_cast<double>(users.empty() ? fleet.size() : users.size());
  for (std::size_t l = 1; l <= ranges.size(); ++l) {
    const auto ask = budget.ask(l, mirror, users);
    AccuracyFirstOptions query = options;
    query.query_id = options.query_id + "-" + std::to_string(l);
    // Users with nothing left are not asked but still counted: they may be inside.
    query.users_not_asked =
        static_cast<std::size_t>(n) - ask.charges.listed().size() + options.users_not_asked;
    CertifiedEstimate result;
    if (ask.charges.listed().empty()) {
      result.upper = n;  // nobody can pay: the count may be anything
      result.report.charged.assign(fleet.size(), Charge{});
    } else {
      CGP_ASSIGN_OR_RETURN(result, range_count_to_accuracy(fleet, mirror, ranges[l - 1],
                                                           ask.charges, target, query));
    }
    result.report.refused.insert(result.report.refused.end(), ask.exhausted.begin(),
                                 ask.exhausted.end());
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace cgp::coordinator
