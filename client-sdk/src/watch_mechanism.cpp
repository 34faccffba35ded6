#include "watch_mechanism.hpp"

#include <algorithm>
#include <cmath>

#include "cgp/client/statistic.hpp"
#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/privacy/rounding.hpp"
#include "cgp/common/validate.hpp"
#include "discrete_gaussian.hpp"

namespace cgp::client {
namespace {

// Components are clamped to this box before φ (as privatizer.cpp does for distances): no
// square overflows, and φ's floating-point error stays within watch_float_error.
constexpr double kComponentLimit = 0x1p31;

// The oriented score: a crossing is always "≥ threshold".
double orient(const WatchSpec& spec, double score) {
  return spec.params().trigger == WatchTrigger::at_or_above ? score : -score;
}

// An upper bound on |φ̃(x) − φ(x)| for components clamped to ±2^31 (privatizer.md, "Floating-
// point error of φ"): a Euclidean, box or ball distance in d dimensions errs by at most
// (d + 4)·2^-53 of 2√d·2^31; a polygon's signed distance by about 16 ulps of 2^31, taken twice.
double watch_float_error(const WatchSpec& spec) {
  const WatchSpecParams& p = spec.params();
  if (p.region && std::holds_alternative<geometry::Polygon>(*p.region)) return 0x1p-17;
  const double d = static_cast<double>(spec.required_dimension());
  return (d + 4) * std::sqrt(d) * 0x1p-21;
}

}  // namespace

StatisticSpec watch_statistic(const WatchSpec& spec) noexcept {
  const WatchSpecParams& p = spec.params();
  StatisticSpec statistic;
  statistic.kind = p.statistic;
  statistic.point = p.point;
  statistic.region = p.region ? &*p.region : nullptr;
  return statistic;
}

double LaplaceWatchPlan::grid() const noexcept {
  return std::ldexp(1.0, grid_exponent);
}

Expected<LaplaceWatchPlan> plan_laplace_watch(const WatchSpec& spec, double capacity) {
  const WatchSpecParams& p = spec.params();
  if (p.noise != WatchNoise::laplace)
    return make_error(ErrorCode::invalid_argument, "noise", "not a laplace watch");
  const double k = lipschitz_constant(p.statistic);
  LaplaceWatchPlan plan;
  // u = 2^e, the largest power of two ≤ 2^-24·K/ε: frexp gives K/ε = m·2^x, m ∈ [0.5, 1).
  int x = 0;
  std::frexp(k / p.epsilon, &x);
  plan.grid_exponent = x - 1 - 24;
  const double u = plan.grid();
  // S ≥ 2K/(εu), an integer: the +1 covers the rounding of the quotient (≤ 2^27, error < 2^-25).
  const double scale = std::ceil(2 * k / (p.epsilon * u)) + 1;
  plan.threshold_scale = static_cast<std::uint64_t>(scale);
  plan.threshold_grid = static_cast<std::int64_t>(std::nearbyint(orient(spec, p.threshold) / u));
  // Pure ε(1 + 2^-10)-GP (watch.md) gives (ε(1 + 2^-10))²/2-CGP (004 Lemma 3.1).
  plan.charged_rho = laplace_watch_charge(p.epsilon);
  if (!(plan.charged_rho >= privacy::min_rho(capacity)))
    return make_error(ErrorCode::out_of_range, "epsilon",
                      "epsilon " + format_number(p.epsilon) + " would charge rho " +
                          format_number(plan.charged_rho) + ", below this device's smallest rho " +
                          format_number(privacy::min_rho(capacity)) + " (capacity * 2^-18)");
  return plan;
}

std::int64_t watch_score_grid(const WatchSpec& spec, int grid_exponent,
                              std::span<const double> component, std::vector<double>& scratch) {
  const WatchSpecParams& p = spec.params();
  scratch.resize(component.size());
  for (std::size_t i = 0; i < component.size(); ++i)
    scratch[i] = std::clamp(component[i], -kComponentLimit, kComponentLimit);
  double phi = 0;
  evaluate_unchecked(watch_statistic(spec), scratch, &phi);
  // fmax/fmin: a NaN (impossible on clamped finite inputs) goes to a bound, not to UB below.
  const double score = std::fmin(std::fmax(phi, p.clamp_lo), p.clamp_hi);
  // |score| ≤ 2^32/ε and u > 2^-25/ε: the quotient is exact and below 2^57 in magnitude.
  return static_cast<std::int64_t>(std::nearbyint(std::ldexp(orient(spec, score), -grid_exponent)));
}

int128 draw_threshold_noise(const LaplaceWatchPlan& plan, RandomBits& bits) {
  return sample_discrete_laplace(plan.threshold_scale, bits);
}

bool laplace_watch_fires(const LaplaceWatchPlan& plan, std::int64_t score_grid,
                         int128 threshold_noise, RandomBits& bits) {
  const int128 query_noise = sample_discrete_laplace(plan.query_scale(), bits);
  return static_cast<int128>(score_grid) + query_noise >=
         static_cast<int128>(plan.threshold_grid) + threshold_noise;
}

double watch_resolution(const WatchSpec& spec, int grid_exponent) {
  const double k = lipschitz_constant(spec.params().statistic);
  const double e = watch_float_error(spec);
  return privacy::next_up(0x1p10 * (std::ldexp(1.0, grid_exponent) + 2 * e) / k);
}

}  // namespace cgp::client
