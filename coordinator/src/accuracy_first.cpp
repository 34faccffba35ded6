#include "cgp/coordinator/accuracy_first.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cgp/common/privacy/budget_split.hpp"
#include "cgp/common/privacy/confidence.hpp"
#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/coordinator/valid_triple.hpp"

namespace cgp::coordinator {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

Status validate(const AccuracyTarget& target, const AccuracyFirstOptions& options) {
  if (!(std::isfinite(target.relative) && target.relative >= 0 && target.relative < 1))
    return make_error(ErrorCode::out_of_range, "relative",
                      "relative must be in [0, 1), got " + format_number(target.relative));
  if (!(std::isfinite(target.absolute) && target.absolute >= 0))
    return make_error(ErrorCode::out_of_range, "absolute",
                      "absolute must be finite and >= 0, got " + format_number(target.absolute));
  if (target.relative == 0 && target.absolute == 0)
    return make_error(ErrorCode::invalid_argument, "target",
                      "the target needs relative > 0 or absolute > 0");
  if (!eliminates(options.method))
    return make_error(ErrorCode::invalid_argument, "method",
                      "method must be PM0 or PM1 for accuracy-first queries, got " +
                          std::string(method_name(options.method)));
  CGP_RETURN_IF_ERROR(require_open_interval("beta", options.beta, 0.0, 1.0));
  return {};
}

// The smallest cap of the query over every shard (collective when sharded).
double smallest_cap(const UserCharges& charges, const Shard& shard) {
  const double smallest = charges.smallest_cap();
  if (!shard.sharded()) return smallest;
  return smallest_over_shards(shard, {{smallest, 0}}, 1).front().key;
}

Expected<EliminationSetup> setup_for(const AccuracyFirstOptions& options, Usefulness phi,
                                     const Fleet& fleet, const UserCharges& charges) {
  EliminationSetup setup;
  setup.query_id = options.query_id;
  setup.component_id = options.component_id;
  setup.phi = phi;
  setup.triple = triple_of(options.method);
  CGP_ASSIGN_OR_RETURN(
      auto fractions,
      accuracy_schedule(options, smallest_cap(charges, options.shard), fleet.initial_budget()));
  setup.rounds = fractions.size();
  setup.fractions = std::move(fractions);
  setup.beta0 = options.beta / 4;
  setup.shard = options.shard;
  setup.latest_release_only = options.latest_release_only;
  return setup;
}

// Users the query is over, on every shard (collective when sharded).
std::uint64_t query_users(const Fleet& fleet, const UserCharges& charges, const Shard& shard) {
  if (shard.query_users > 0) return shard.query_users;
  return sum_over_shards(shard, charges.is_everyone() ? fleet.size() : charges.listed().size());
}

// φ̄_u: the mean of the user's releases, through φ for point releases.
double estimate_of(const EliminationResult& r, const EliminationSetup& setup, UserId u,
                   std::vector<double>& buffer) {
  buffer.resize(r.estimates.dimension);
  r.estimates.mean(u, buffer.data());
  return setup.triple == Triple::point ? setup.phi.evaluate(buffer) : buffer[0];
}

CertifiedEstimate finish(EliminationResult& result, double pm_estimate,
                         std::pair<double, double> interval, const AccuracyTarget& target) {
  CertifiedEstimate out;
  out.lower = interval.first;
  out.upper = interval.second;
  const auto [from, to] = certifying_window(out.lower, out.upper, target);
  out.certified = from <= to;
  // Moving the estimate into the window is post-processing of the released values.
  out.estimate = out.certified ? std::clamp(pm_estimate, from, to) : pm_estimate;
  out.report = std::move(result.report);
  return out;
}

}  // namespace

Expected<std::vector<double>> accuracy_schedule(const AccuracyFirstOptions& options,
                                                double smallest_cap, double device_budget) {
  CGP_ASSIGN_OR_RETURN(auto fractions, privacy::geometric_split(1.0, options.growth,
                                                                options.max_rounds, options.first));
  if (!(smallest_cap > 0) || !std::isfinite(smallest_cap) || !(device_budget > 0) ||
      !std::isfinite(device_budget))
    return fractions;  // the charges' and fleet's own checks name these
  // The asked ρ is a little below cap·share (rho_within_charge: ≥ cap/(1 + 2^-10)^2 − ulps, and
  // the 2^-40 shave): 1% covers it.
  const double needed = 1.01 * privacy::min_rho(device_budget) / smallest_cap;
  if (fractions.front() >= needed || needed >= 1) return fractions;
  return privacy::geometric_split(1.0, options.growth, options.max_rounds, needed);
}

std::pair<double, double> certifying_window(double lower, double upper,
                                            const AccuracyTarget& target) noexcept {
  auto tolerance = [&](double c) { return std::max(target.relative * c, target.absolute); };
  return {upper - tolerance(upper), lower + tolerance(lower)};
}

Expected<CertifiedEstimate> range_count_to_accuracy(Fleet& fleet, BudgetMirror& mirror,
                                                    const geometry::Region& range,
                                                    const UserCharges& charges,
                                                    const AccuracyTarget& target,
                                                    const AccuracyFirstOptions& options) {
  CGP_RETURN_IF_ERROR(validate(target, options));
  if (geometry::dimension(range) != fleet.dimension())
    return make_error(ErrorCode::dimension_mismatch, "range",
                      "range has dimension " + std::to_string(geometry::dimension(range)) +
                          ", the fleet " + std::to_string(fleet.dimension()));
  CGP_ASSIGN_OR_RETURN(
      const auto setup,
      setup_for(options, Usefulness{StatisticKind::signed_distance_to_region, {}, &range}, fleet,
                charges));
  const Shard& shard = options.shard;
  const double n0 =
      static_cast<double>(query_users(fleet, charges, shard) + options.users_not_asked);
  // Lemma 5.2: S₁ users are inside, S₀ users outside; the undecided and the users that left the
  // query (refused, rejected, unanswered) may be either.
  auto interval = [&](const EliminationResult& r) {
    const Tally decided = tally_over_shards(shard, {r.s1.size(), r.s0.size()});
    return std::pair{static_cast<double>(decided.counted),
                     n0 - static_cast<double>(decided.eliminated)};
  };
  const StopRule stop = [&](const EliminationResult& r, std::span<const UserId>) {
    const auto [lower, upper] = interval(r);
    const auto [from, to] = certifying_window(lower, upper, target);
    return from <= to;
  };
  CGP_ASSIGN_OR_RETURN(auto result,
                       eliminate_noninteractive(fleet, mirror, setup, charges, 0.0, 0.0, stop));
  // The PM estimate (range_count's): S₁ and the undecided whose estimate is below η.
  std::uint64_t count = result.s1.size();
  std::vector<double> buffer;
  double eta_rho_bar = -1, eta = 0;
  for (UserId u : result.remaining) {
    const double estimate = estimate_of(result, setup, u, buffer);
    if (setup.triple == Triple::distance && options.shift &&
        result.estimates.rho_bar[u] != eta_rho_bar) {
      eta_rho_bar = result.estimates.rho_bar[u];
      eta = range_threshold_shift(range, 1 / std::sqrt(2 * eta_rho_bar));
    }
    count += estimate < eta ? 1 : 0;
  }
  const double pm =
      static_cast<double>(tally_over_shards(shard, {count, result.s0.size()}).counted);
  const auto bounds = interval(result);
  return finish(result, pm, bounds, target);
}

Expected<CertifiedEstimate> kde_to_accuracy(Fleet& fleet, BudgetMirror& mirror,
                                            std::span<const double> p, double bandwidth,
                                            const UserCharges& charges,
                                            const AccuracyTarget& target,
                                            const AccuracyFirstOptions& options) {
  CGP_RETURN_IF_ERROR(validate(target, options));
  CGP_RETURN_IF_ERROR(require_finite_positive("bandwidth", bandwidth));
  CGP_RETURN_IF_ERROR(require_dimension("p", p, fleet.dimension()));
  CGP_RETURN_IF_ERROR(require_all_finite("p", p));
  CGP_ASSIGN_OR_RETURN(
      const auto setup,
      setup_for(options, Usefulness{StatisticKind::distance_to_point, p, nullptr}, fleet, charges));
  const Shard& shard = options.shard;
  const double n =
      static_cast<double>(query_users(fleet, charges, shard) + options.users_not_asked);
  const std::size_t release_dimension = setup.triple == Triple::point ? fleet.dimension() : 1;
  const double rounds = static_cast<double>(setup.fractions.size());
  auto kernel = [&](double d) { return std::exp(-d * d / (2 * bandwidth * bandwidth)); };
  std::vector<double> buffer;
  // Lemma 5.2's intervals hold jointly for every undecided user with the radius of the round
  // just run (λ from the group before it), so each kernel lies between its ends' values.
  auto interval = [&](const EliminationResult& r,
                      std::span<const UserId> group) -> Expected<std::pair<double, double>> {
    // A lost shard's undecided users (the live tier) are neither counted nor eliminated: they
    // left the query, and widen the upper end.
    const Tally counts = tally_over_shards(shard, {group.size(), r.s0.size()});
    const double before =
        static_cast<double>(counts.counted + r.report.eliminated_per_round.back());
    CGP_ASSIGN_OR_RETURN(
        const double lambda,
        privacy::gaussian_norm_bound(release_dimension, setup.beta0 / (rounds * before)));
    ShardSum low(shard), high(shard);
    for (UserId u : group) {
      const double phi = estimate_of(r, setup, u, buffer);
      const double h = radius_from_lambda(lambda, r.estimates.rho_bar[u]);
      low.add(kernel(phi + h));
      high.add(kernel(std::max(0.0, phi - h)));
    }
    const double eliminated = static_cast<double>(counts.eliminated);
    const double out = n - eliminated - static_cast<double>(counts.counted);  // left the query
    const double lower = low.total() / n;
    const double upper = (high.total() + eliminated * std::exp(-18.0) + out) / n;
    return std::pair{lower, upper};
  };
  Status failed;
  const StopRule stop = [&](const EliminationResult& r, std::span<const UserId> group) {
    auto bounds = interval(r, group);
    if (!bounds) {  // λ cannot fail for β in (0, 1); stop rather than certify on nothing
      failed = bounds.error();
      return true;
    }
    const auto [from, to] = certifying_window(bounds->first, bounds->second, target);
    return from <= to;
  };
  CGP_ASSIGN_OR_RETURN(auto result, eliminate_noninteractive(fleet, mirror, setup, charges,
                                                             -kInfinity, 6 * bandwidth, stop));
  CGP_RETURN_IF_ERROR(std::move(failed));
  // The PM estimate (kde's): the undecided users' kernels, plus e^-18 per eliminated user when
  // that bias is not larger than the rest.
  ShardSum kernels(shard);
  for (UserId u : result.remaining) kernels.add(kernel(estimate_of(result, setup, u, buffer)));
  const double kernel_total = kernels.total();
  const std::uint64_t eliminated =
      tally_over_shards(shard, {result.remaining.size(), result.s0.size()}).eliminated;
  double pm = kernel_total / n;
  const double bias = static_cast<double>(eliminated) * std::exp(-18.0) / n;
  if (bias <= pm) pm += bias;
  CGP_ASSIGN_OR_RETURN(const auto bounds, interval(result, result.remaining));
  return finish(result, pm, bounds, target);
}

}  // namespace cgp::coordinator
