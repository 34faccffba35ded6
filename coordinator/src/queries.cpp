#include "cgp/coordinator/queries.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "cgp/common/geometry/signed_distance.hpp"
#include "cgp/common/geometry/threshold_shift.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::coordinator {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

EliminationSetup setup_for(const QueryOptions& options, Usefulness phi) {
  EliminationSetup setup;
  setup.query_id = options.query_id;
  setup.component_id = options.component_id;
  setup.phi = phi;
  setup.triple = triple_of(options.method);
  setup.rounds = eliminates(options.method) ? options.rounds : 1;
  setup.split = options.split;
  setup.beta0 = options.beta / 4;
  setup.shard = options.shard;
  return setup;
}

Status validate_local(const Fleet& fleet, const UserCharges& charges, const QueryOptions& options) {
  CGP_RETURN_IF_ERROR(require_open_interval("beta", options.beta, 0.0, 1.0));
  if (eliminates(options.method))
    CGP_RETURN_IF_ERROR(require_count_in("c", options.rounds, 1, privacy::kMaxRounds));
  return charges.validate(fleet.size(), /*allow_empty=*/options.shard.sharded());
}

// Collective: a shard's bad charges stop the query on every shard.
Status validate_common(const Fleet& fleet, const UserCharges& charges,
                       const QueryOptions& options) {
  return agree_over_shards(options.shard, validate_local(fleet, charges, options));
}

// The users a query is over, on every shard (collective when sharded).
std::uint64_t query_users(const Fleet& fleet, const UserCharges& charges,
                          const QueryOptions& options) {
  if (options.shard.query_users > 0) return options.shard.query_users;
  if (charges.is_everyone())
    return options.shard.sharded() ? options.shard.fleet_users : fleet.size();
  return sum_over_shards(options.shard, charges.listed().size());
}

// visit(first, n, means) for each block of the remaining users' mean releases (n users from
// position first of r.remaining, their means row by row).
template <class Visit>
void for_mean_blocks(const EliminationResult& r, Visit&& visit) {
  constexpr std::size_t kBlock = 256;
  const std::span<const UserId> users = r.remaining;
  const std::size_t d = r.estimates.dimension;
  std::vector<double> means(kBlock * d);
  for (std::size_t first = 0; first < users.size(); first += kBlock) {
    const std::size_t n = std::min(kBlock, users.size() - first);
    for (std::size_t i = 0; i < n; ++i) r.estimates.mean(users[first + i], means.data() + i * d);
    visit(first, n, means.data());
  }
}

// How many remaining users' mean releases lie inside the range (point triple: φ̄ < 0 is
// geometry::inside of the mean).
std::uint64_t means_inside(const EliminationResult& r, const geometry::Region& range) {
  std::uint64_t inside = 0;
  for_mean_blocks(r, [&](std::size_t, std::size_t n, const double* means) {
    inside += geometry::count_inside(range, means, n);
  });
  return inside;
}

// φ̄ of each remaining user, in the order of r.remaining: the mean itself (distance triple,
// d = 1) or φ of the mean release (point triple).
std::vector<double> final_estimates(const EliminationResult& r, const Usefulness& phi,
                                    Triple triple) {
  const std::span<const UserId> users = r.remaining;
  std::vector<double> out(users.size());
  if (triple == Triple::distance) {
    for (std::size_t i = 0; i < users.size(); ++i)
      out[i] = r.estimates.sum[users[i]] / r.estimates.rho_bar[users[i]];
    return out;
  }
  for_mean_blocks(r, [&](std::size_t first, std::size_t n, const double* means) {
    phi.evaluate(means, n, r.estimates.dimension, out.data() + first);
  });
  return out;
}

// ρ-release elimination or single release, by method.
Expected<EliminationResult> run(Fleet& fleet, BudgetMirror& mirror, const EliminationSetup& setup,
                                const UserCharges& charges, Method method, double nu_low,
                                double nu_high) {
  if (!eliminates(method)) return release_once(fleet, mirror, setup, charges);
  return eliminate_noninteractive(fleet, mirror, setup, charges, nu_low, nu_high);
}

geometry::Box bounding_box(const geometry::Region& range) {
  std::vector<double> lo, hi;
  std::visit(
      [&](const auto& r) {
        using T = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<T, geometry::Box>) {
          lo.assign(r.lo().begin(), r.lo().end());
          hi.assign(r.hi().begin(), r.hi().end());
        } else if constexpr (std::is_same_v<T, geometry::Ball>) {
          for (double c : r.center()) lo.push_back(c - r.radius()), hi.push_back(c + r.radius());
        } else {
          lo = {kInfinity, kInfinity};
          hi = {-kInfinity, -kInfinity};
          for (const auto& p : r.outer())
            for (int a = 0; a < 2; ++a)
              lo[a] = std::min(lo[a], p[a]), hi[a] = std::max(hi[a], p[a]);
        }
      },
      range);
  return *geometry::Box::create(lo, hi);  // valid: built from a valid region
}

}  // namespace

std::string_view method_name(Method method) noexcept {
  switch (method) {
    case Method::BM0:
      return "BM0";
    case Method::BM1:
      return "BM1";
    case Method::PM0:
      return "PM0";
    case Method::PM1:
      return "PM1";
  }
  return "?";
}

Expected<Method> parse_method(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (Method m : {Method::BM0, Method::BM1, Method::PM0, Method::PM1})
    if (upper == method_name(m)) return m;
  return make_error(ErrorCode::invalid_argument, "method",
                    "method must be one of BM0, BM1, PM0, PM1, got '" + std::string(name) + "'");
}

double range_threshold_shift(const geometry::Region& range, double gamma) {
  if (geometry::dimension(range) != 2 || !(gamma > 0) || !std::isfinite(gamma)) return 0.0;
  auto eta = geometry::rectangle_threshold_shift(gamma, bounding_box(range));
  return eta ? *eta : 0.0;
}

Expected<CountResult> range_count(Fleet& fleet, BudgetMirror& mirror, const geometry::Region& range,
                                  const UserCharges& charges, const QueryOptions& options) {
  CGP_RETURN_IF_ERROR(validate_common(fleet, charges, options));
  if (geometry::dimension(range) != fleet.dimension())
    return make_error(ErrorCode::dimension_mismatch, "range",
                      "range has dimension " + std::to_string(geometry::dimension(range)) +
                          ", the fleet " + std::to_string(fleet.dimension()));
  const Usefulness phi{StatisticKind::signed_distance_to_region, {}, &range};
  const EliminationSetup setup = setup_for(options, phi);
  // Alg. 6: ν_low = ν_high = 0.
  CGP_ASSIGN_OR_RETURN(auto result, run(fleet, mirror, setup, charges, options.method, 0.0, 0.0));
  CountResult out;
  std::uint64_t count = result.s1.size();
  if (setup.triple == Triple::point) {
    // φ̄ < η = 0: the mean release inside the range (the shift is the distance triple's).
    count += means_inside(result, range);
  } else {
    const std::vector<double> estimates = final_estimates(result, phi, setup.triple);
    // η depends on ρ̄ only, which users asked alike share: computed once per value.
    double eta_rho_bar = -1, eta = 0;
    for (std::size_t i = 0; i < estimates.size(); ++i) {
      const UserId u = result.remaining[i];
      if (options.shift && result.estimates.rho_bar[u] != eta_rho_bar) {
        eta_rho_bar = result.estimates.rho_bar[u];
        eta = range_threshold_shift(range, 1 / std::sqrt(2 * eta_rho_bar));
      }
      count += estimates[i] < eta ? 1 : 0;
    }
  }
  out.estimate =
      static_cast<double>(tally_over_shards(options.shard, {count, result.s0.size()}).counted);
  out.report = std::move(result.report);
  return out;
}

Expected<KdeResult> kde(Fleet& fleet, BudgetMirror& mirror, std::span<const double> p,
                        double bandwidth, const UserCharges& charges, const QueryOptions& options) {
  CGP_RETURN_IF_ERROR(validate_common(fleet, charges, options));
  CGP_RETURN_IF_ERROR(require_finite_positive("bandwidth", bandwidth));
  CGP_RETURN_IF_ERROR(require_dimension("p", p, fleet.dimension()));
  CGP_RETURN_IF_ERROR(require_all_finite("p", p));
  const Usefulness phi{StatisticKind::distance_to_point, p, nullptr};
  const EliminationSetup setup = setup_for(options, phi);
  // Alg. 7: ν_low = −∞, ν_high = 6b: a user farther than 6b adds at most e^-18/n.
  CGP_ASSIGN_OR_RETURN(
      auto result, run(fleet, mirror, setup, charges, options.method, -kInfinity, 6 * bandwidth));
  const double n = static_cast<double>(query_users(fleet, charges, options));
  // Exact, rounded once: the same sum however the fleet is sharded.
  ShardSum kernel_sum(options.shard);
  for (const double distance : final_estimates(result, phi, setup.triple))
    kernel_sum.add(std::exp(-distance * distance / (2 * bandwidth * bandwidth)));
  const double kernel_total = kernel_sum.total();
  const Tally counts =
      tally_over_shards(options.shard, {result.remaining.size(), result.s0.size()});
  KdeResult out;
  if (eliminates(options.method) && counts.counted == 0) {
    out.estimate = 0;  // every user is beyond 6b: the density is at most e^-18 (Cor. 6.4)
  } else {
    out.estimate = kernel_total / n;
    // The eliminated users' bound e^-18 each; omitted when larger than the rest (§6.3.2).
    const double bias = static_cast<double>(counts.eliminated) * std::exp(-18.0) / n;
    if (bias <= out.estimate) out.estimate += bias;
  }
  out.report = std::move(result.report);
  return out;
}

Expected<KnnResult> knn(Fleet& fleet, BudgetMirror& mirror, std::span<const double> p,
                        std::size_t k, const UserCharges& charges, const QueryOptions& options) {
  CGP_RETURN_IF_ERROR(validate_common(fleet, charges, options));
  CGP_RETURN_IF_ERROR(require_dimension("p", p, fleet.dimension()));
  CGP_RETURN_IF_ERROR(require_all_finite("p", p));
  const std::uint64_t users = query_users(fleet, charges, options);
  if (k == 0 || k >= users)
    return make_error(
        ErrorCode::out_of_range, "k",
        "k must be in [1, " + std::to_string(users - 1) + "], got " + std::to_string(k));
  const Usefulness phi{StatisticKind::distance_to_point, p, nullptr};
  const EliminationSetup setup = setup_for(options, phi);
  auto result = eliminates(options.method) ? eliminate_k(fleet, mirror, setup, charges, k)
                                           : release_once(fleet, mirror, setup, charges);
  if (!result) return result.error();
  // The k smallest private estimates among the candidates over every shard (all of them if
  // |G_ĵ| ≤ k), ties by global id.
  const std::vector<double> estimates = final_estimates(*result, phi, setup.triple);
  std::vector<Ranked> ranked(estimates.size());
  for (std::size_t i = 0; i < estimates.size(); ++i)
    ranked[i] = {estimates[i], global_id(options.shard, result->remaining[i])};
  KnnResult out;
  for (const Ranked& r : smallest_over_shards(options.shard, std::move(ranked), k))
    out.neighbours.push_back(static_cast<UserId>(r.id));
  out.report = std::move(result->report);
  return out;
}

Expected<ThresholdResult> threshold(Fleet& fleet, BudgetMirror& mirror, UserId user, double q,
                                    double population, Charge cap, const QueryOptions& options) {
  if (options.shard.sharded())
    return make_error(ErrorCode::invalid_argument, "shard",
                      "the threshold query asks one user: run it on an unsharded fleet");
  if (user >= fleet.size())
    return make_error(ErrorCode::out_of_range, "user", "user is not in the fleet");
  const auto charges = UserCharges::uniform(cap, {user});
  CGP_RETURN_IF_ERROR(validate_common(fleet, charges, options));
  CGP_RETURN_IF_ERROR(require_open_interval("q", q, 0.0, 1.0));
  CGP_RETURN_IF_ERROR(require_finite_positive("population", population));
  if (fleet.dimension() != 1)
    return make_error(ErrorCode::dimension_mismatch, "fleet",
                      "the threshold query needs a 1-D count component, the fleet has dimension " +
                          std::to_string(fleet.dimension()));
  // φ = the count itself (identity on a 1-D component): released as `location`, so both
  // triples coincide here (λ(1, ·)).
  const Usefulness phi{StatisticKind::location, {}, nullptr};
  QueryOptions as_point = options;
  as_point.method = eliminates(options.method) ? Method::PM0 : Method::BM0;
  EliminationSetup setup = setup_for(as_point, phi);
  const double level = q * population;
  CGP_ASSIGN_OR_RETURN(auto result,
                       run(fleet, mirror, setup, charges, as_point.method, level, level));
  ThresholdResult out;
  // PIE-NI: s1 means count < qN, s0 means count > qN (Lemma 5.2). (Alg. 9's text names them
  // the other way round; the semantics of Alg. 4 are what is implemented.)
  std::vector<double> mean(1);
  if (!result.s1.empty()) {
    out.below = true;
  } else if (!result.s0.empty()) {
    out.below = false;
  } else if (!result.remaining.empty()) {
    result.estimates.mean(user, mean.data());
    out.below = mean[0] < level;
  }
  out.report = std::move(result.report);
  return out;
}

}  // namespace cgp::coordinator
