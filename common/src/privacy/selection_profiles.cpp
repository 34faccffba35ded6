#include "cgp/common/privacy/selection_profiles.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>

#include "cgp/common/privacy/rounding.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::privacy {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

double normal_cdf(double x) {
  return 0.5 * std::erfc(-x / std::numbers::sqrt2);
}

// δ_G(ε; μ) rounded up, for any real ε (selection_profiles.md, "Rounding"): the difference
// A − B of two erfc values, plus a bound on its rounding that scales with the arguments' squares
// (in the tail, an error in the argument x of Φ(x) moves it by |x| relatively).
double delta_upper(double mu, double epsilon) {
  const double a = mu / 2 - epsilon / mu, b = -mu / 2 - epsilon / mu;
  const double big = normal_cdf(a);
  if (epsilon > 700) return std::min(1.0, big * (1 + 8 * DBL_EPSILON * (1 + a * a)) + 1e-300);
  const double small = std::exp(epsilon) * normal_cdf(b);
  const double slack = 8 * DBL_EPSILON * (1 + std::max(a * a, b * b)) * (big + small);
  return std::min({1.0, std::max(big - small, 0.0) + slack + 1e-300,
                   big * (1 + 8 * DBL_EPSILON * (1 + a * a)) + 1e-300});
}

// The smallest ε ≥ 0 (up to bisection) with delta_upper(ε) ≤ target: the invariant
// delta_upper(hi) ≤ target holds for the value returned, so it is sound as computed.
double profile_epsilon_upper(double mu, double target) {
  if (!(target > 1e-300)) return kInfinity;
  if (delta_upper(mu, 0) <= target) return 0;
  double lo = 0, hi = 1;
  while (delta_upper(mu, hi) > target) {
    lo = hi;
    hi *= 2;
    if (hi > 1e300) return kInfinity;
  }
  for (int i = 0; i < 200; ++i) {
    const double mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi) break;
    (delta_upper(mu, mid) <= target ? hi : lo) = mid;
  }
  return hi;
}

Status require_mu(double mu) {
  return require_finite_positive("mu", mu);
}

Error not_certifiable(const char* what) {
  return make_error(ErrorCode::out_of_range, "delta",
                    std::string("delta: too small for ") + what + " to certify any epsilon");
}

// Truncated negative binomial: E[K] and the ε₁ penalty (η + 1)·log(e^ε₁ + c·δ(ε₁)), c = (1−γ)/γ,
// minimised over ε₁ ∈ [0, max(0, log c)] by golden section (002 Thm 5.2: any ε₁ ≥ 0 is valid;
// e^ε₁ + c·δ(ε₁) is unimodal, its minimiser inside that interval).
double tnb_mean(double eta, double gamma) {
  if (eta == 0) return (1 / gamma - 1) / std::log(1 / gamma);
  return eta * (1 - gamma) / (gamma * -std::expm1(eta * std::log(gamma)));
}

double tnb_penalty_at(double eta, double c, double mu, double eps1) {
  return pad_up((eta + 1) * pad_up(std::log(pad_up(std::exp(eps1)) + c * delta_upper(mu, eps1))));
}

double tnb_penalty(double eta, double gamma, double mu) {
  const double c = pad_up((1 - gamma) / gamma);
  double lo = 0, hi = std::max(0.0, std::log(c));
  const double phi = (std::sqrt(5.0) - 1) / 2;
  double best = tnb_penalty_at(eta, c, mu, 0);
  for (int i = 0; i < 120 && hi - lo > 1e-12; ++i) {
    const double x1 = hi - phi * (hi - lo), x2 = lo + phi * (hi - lo);
    const double f1 = tnb_penalty_at(eta, c, mu, x1), f2 = tnb_penalty_at(eta, c, mu, x2);
    best = std::min({best, f1, f2});
    (f1 < f2 ? hi : lo) = (f1 < f2 ? x2 : x1);
  }
  return best;
}

// Binomial: the smallest feasible ε₁ (ε₁ ≥ log1p(p/(1−p)·δ(ε₁)), Thm 5.7), where the penalty
// (n − 1)·log1p(p·(e^ε₁ − 1) + p·δ(ε₁)), non-decreasing in ε₁, is least.
double binomial_penalty(std::uint64_t n, double p, double mu) {
  const double odds = pad_up(p / (1 - p));
  auto feasible = [&](double eps1) {
    return eps1 >= pad_up(std::log1p(odds * delta_upper(mu, eps1)));
  };
  double lo = 0, hi = pad_up(-std::log1p(-p));
  while (!feasible(hi)) hi = 2 * hi + DBL_MIN;  // δ ≤ 1 makes −log(1 − p) feasible already
  if (feasible(0)) hi = 0;
  for (int i = 0; i < 200 && hi > 0; ++i) {
    const double mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi) break;
    (feasible(mid) ? hi : lo) = mid;
  }
  const double inner = pad_up(p * pad_up(std::expm1(hi)) + p * delta_upper(mu, hi));
  return pad_up(static_cast<double>(n - 1) * pad_up(std::log1p(inner)));
}

double poisson_penalty(double mean, double mu) {
  // Cor 5.8 at ε₁ = 0 (the best choice: the penalty is non-decreasing in ε₁): m·δ_G(0; μ),
  // δ_G(0; μ) = erf(μ/(2√2)).
  return pad_up(mean * pad_up(std::erf(mu / (2 * std::numbers::sqrt2))));
}

// The penalty each theorem adds to the base mechanism's ε at δ/m.
double selection_penalty(const RandomRuns& runs, double mu) {
  switch (runs.kind) {
    case RandomRuns::Kind::truncated_negative_binomial:
      return tnb_penalty(runs.eta, runs.gamma, mu);
    case RandomRuns::Kind::binomial:
      return binomial_penalty(runs.n, runs.p, mu);
    case RandomRuns::Kind::poisson:
      return poisson_penalty(runs.mean, mu);
  }
  return kInfinity;
}

double mean_of(const RandomRuns& runs) {
  switch (runs.kind) {
    case RandomRuns::Kind::truncated_negative_binomial:
      return tnb_mean(runs.eta, runs.gamma);
    case RandomRuns::Kind::binomial:
      return static_cast<double>(runs.n) * runs.p;
    case RandomRuns::Kind::poisson:
      return runs.mean;
  }
  return kInfinity;
}

}  // namespace

Expected<double> gaussian_delta_upper(double mu, double epsilon) {
  CGP_RETURN_IF_ERROR(require_mu(mu));
  CGP_RETURN_IF_ERROR(require_finite("epsilon", epsilon));
  if (epsilon < 0)
    return make_error(ErrorCode::out_of_range, "epsilon",
                      "epsilon must be >= 0, got " + format_number(epsilon));
  return delta_upper(mu, epsilon);
}

Expected<double> gaussian_epsilon_upper(double mu, double delta) {
  CGP_RETURN_IF_ERROR(require_mu(mu));
  CGP_RETURN_IF_ERROR(require_open_interval("delta", delta, 0.0, 1.0));
  const double eps = profile_epsilon_upper(mu, delta);
  if (!std::isfinite(eps)) return not_certifiable("a Gaussian mechanism");
  return eps;
}

Expected<double> gaussian_rnm_profile_delta(std::uint64_t candidates, double sensitivity,
                                            double sigma, double epsilon, bool monotone) {
  CGP_RETURN_IF_ERROR(require_count_in("candidates", candidates, 1, std::uint64_t{1} << 50));
  CGP_RETURN_IF_ERROR(require_finite_positive("sensitivity", sensitivity));
  CGP_RETURN_IF_ERROR(require_finite_positive("sigma", sigma));
  CGP_RETURN_IF_ERROR(require_finite("epsilon", epsilon));
  if (epsilon < 0)
    return make_error(ErrorCode::out_of_range, "epsilon",
                      "epsilon must be >= 0, got " + format_number(epsilon));
  const auto m = static_cast<double>(candidates);
  const double shift = pad_up((monotone ? 1 : 2) * sensitivity / sigma);
  const double vector = pad_up(std::sqrt(m) * sensitivity / sigma);
  return std::min({1.0, pad_up(m * delta_upper(shift, epsilon)), delta_upper(vector, epsilon)});
}

Expected<double> gaussian_rnm_profile_epsilon(std::uint64_t candidates, double sensitivity,
                                              double sigma, double delta, bool monotone) {
  CGP_RETURN_IF_ERROR(require_count_in("candidates", candidates, 1, std::uint64_t{1} << 50));
  CGP_RETURN_IF_ERROR(require_finite_positive("sensitivity", sensitivity));
  CGP_RETURN_IF_ERROR(require_finite_positive("sigma", sigma));
  CGP_RETURN_IF_ERROR(require_open_interval("delta", delta, 0.0, 1.0));
  const auto m = static_cast<double>(candidates);
  const double shift = pad_up((monotone ? 1 : 2) * sensitivity / sigma);
  const double vector = pad_up(std::sqrt(m) * sensitivity / sigma);
  const double eps = std::min(profile_epsilon_upper(shift, next_down(delta / pad_up(m))),
                              profile_epsilon_upper(vector, delta));
  if (!std::isfinite(eps)) return not_certifiable("report noisy max");
  return eps;
}

RandomRuns RandomRuns::truncated_negative_binomial(double eta, double gamma) {
  RandomRuns r;
  r.kind = Kind::truncated_negative_binomial;
  r.eta = eta;
  r.gamma = gamma;
  return r;
}
RandomRuns RandomRuns::geometric(double expected_runs) {
  return truncated_negative_binomial(1, 1 / expected_runs);
}
RandomRuns RandomRuns::binomial(std::uint64_t n, double p) {
  RandomRuns r;
  r.kind = Kind::binomial;
  r.n = n;
  r.p = p;
  return r;
}
RandomRuns RandomRuns::poisson(double mean) {
  RandomRuns r;
  r.kind = Kind::poisson;
  r.mean = mean;
  return r;
}

Status validate(const RandomRuns& runs) {
  switch (runs.kind) {
    case RandomRuns::Kind::truncated_negative_binomial:
      CGP_RETURN_IF_ERROR(require_finite("eta", runs.eta));
      if (!(runs.eta > -1 && runs.eta <= 1e6))
        return make_error(ErrorCode::out_of_range, "eta",
                          "eta must lie in (-1, 1e6], got " + format_number(runs.eta));
      return require_open_interval("gamma", runs.gamma, 0.0, 1.0);
    case RandomRuns::Kind::binomial:
      CGP_RETURN_IF_ERROR(require_count_in("n", runs.n, 1, std::uint64_t{1} << 50));
      return require_open_interval("p", runs.p, 0.0, 1.0);
    case RandomRuns::Kind::poisson:
      CGP_RETURN_IF_ERROR(require_finite_positive("mean", runs.mean));
      if (runs.mean > 1e15)
        return make_error(ErrorCode::out_of_range, "mean",
                          "mean must be at most 1e15, got " + format_number(runs.mean));
      return {};
  }
  return make_error(ErrorCode::invalid_argument, "kind", "kind is not a known value");
}

Expected<double> expected_runs(const RandomRuns& runs) {
  CGP_RETURN_IF_ERROR(validate(runs));
  return mean_of(runs);
}

Expected<double> gaussian_selection_epsilon(const RandomRuns& runs, double mu, double delta) {
  CGP_RETURN_IF_ERROR(validate(runs));
  CGP_RETURN_IF_ERROR(require_mu(mu));
  CGP_RETURN_IF_ERROR(require_open_interval("delta", delta, 0.0, 1.0));
  // ε = ε_Q(δ/m) + penalty (Thm 5.2, 5.7, Cor 5.8 solved for ε).
  const double m = pad_up(mean_of(runs));
  const double base = profile_epsilon_upper(mu, next_down(delta / m));
  if (!std::isfinite(base)) return not_certifiable("this selection");
  return pad_up(base + selection_penalty(runs, mu));
}

Expected<double> gaussian_selection_delta(const RandomRuns& runs, double mu, double epsilon) {
  CGP_RETURN_IF_ERROR(validate(runs));
  CGP_RETURN_IF_ERROR(require_mu(mu));
  CGP_RETURN_IF_ERROR(require_finite("epsilon", epsilon));
  if (!(epsilon > 0))
    return make_error(ErrorCode::out_of_range, "epsilon",
                      "epsilon must be > 0, got " + format_number(epsilon));
  const double m = pad_up(mean_of(runs));
  const double shifted = next_down(epsilon - selection_penalty(runs, mu));
  return std::min(1.0, pad_up(m * delta_upper(mu, shifted)));
}

Expected<double> gaussian_selection_epsilon_rdp(const RandomRuns& runs, double mu, double delta) {
  CGP_RETURN_IF_ERROR(validate(runs));
  CGP_RETURN_IF_ERROR(require_mu(mu));
  CGP_RETURN_IF_ERROR(require_open_interval("delta", delta, 0.0, 1.0));
  if (runs.kind != RandomRuns::Kind::truncated_negative_binomial)
    return make_error(ErrorCode::invalid_argument, "runs",
                      "runs: the RDP bound (002 Thm 5.1) is for truncated negative binomial runs");
  const double eta = runs.eta, gamma = runs.gamma;
  const double m = pad_up(tnb_mean(eta, gamma));
  const double log_inv_gamma = -std::log(gamma);
  const double alpha_hat = std::max(1.0, std::sqrt(2 * log_inv_gamma) / mu);
  const double fixed = (eta + 1) * (1 - 1 / alpha_hat) * alpha_hat * mu * mu / 2 +
                       (eta + 1) * log_inv_gamma / alpha_hat;
  auto epsilon_at = [&](double alpha) {
    const double rdp = alpha * mu * mu / 2 + fixed + std::log(m) / (alpha - 1);
    return rdp + std::log1p(-1 / alpha) - (std::log(delta) + std::log(alpha)) / (alpha - 1);
  };
  // Every α > 1 gives a valid ε: a geometric grid, then a finer one around the best point.
  double best = kInfinity, best_alpha = 2;
  for (double alpha = 1 + 1e-3; alpha < 1e6; alpha *= 1.02) {
    const double e = epsilon_at(alpha);
    if (e < best) best = e, best_alpha = alpha;
  }
  for (double alpha = best_alpha / 1.02; alpha < best_alpha * 1.02; alpha *= 1.0002)
    if (alpha > 1) best = std::min(best, epsilon_at(alpha));
  // A few operations on values of moderate size: 64 ulps of their magnitude cover the rounding.
  return pad_up(best + 64 * DBL_EPSILON * (std::fabs(best) + std::fabs(std::log(delta)) + 1));
}

Expected<double> tnb_selection_epsilon_from_approx_dp(double eta, double gamma, double epsilon0,
                                                      double delta0) {
  CGP_RETURN_IF_ERROR(validate(RandomRuns::truncated_negative_binomial(eta, gamma)));
  CGP_RETURN_IF_ERROR(require_finite_positive("epsilon0", epsilon0));
  CGP_RETURN_IF_ERROR(require_open_interval("delta0", delta0, 0.0, 1.0));
  // ε₁ = ε̂ = ε₀, δ_Q(ε₀) ≤ δ₀: ε = ε₀ + (η + 1)·log(e^ε₀ + ((1 − γ)/γ)·δ₀).
  const double c = pad_up((1 - gamma) / gamma);
  const double log_term = pad_up(std::log(pad_up(std::exp(epsilon0)) + pad_up(c * delta0)));
  return pad_up(epsilon0 + pad_up((eta + 1) * log_term));
}

Expected<double> brownian_mixture_boundary(double v, double gamma, double delta) {
  CGP_RETURN_IF_ERROR(require_finite_positive("v", v));
  CGP_RETURN_IF_ERROR(require_finite_positive("gamma", gamma));
  CGP_RETURN_IF_ERROR(require_open_interval("delta", delta, 0.0, 1.0));
  // log((V + γ)/(δ²γ)) as a sum of logs: δ² underflows below 1e-154.
  const double total = pad_up(v + gamma);
  const double log_term =
      pad_up(std::log(total) - std::log(gamma) - 2 * std::log(delta) +
             4 * DBL_EPSILON *
                 (std::fabs(std::log(total)) + std::fabs(std::log(gamma)) - 2 * std::log(delta)));
  return pad_up(std::sqrt(pad_up(total * log_term)));
}

Expected<double> brownian_expost_epsilon(double v, double gamma, double delta) {
  CGP_ASSIGN_OR_RETURN(double psi, brownian_mixture_boundary(v, gamma, delta));
  return pad_up(v / 2 + psi);
}

}  // namespace cgp::privacy
