#include "normal_expectation.hpp"

#include <boost/math/quadrature/gauss_kronrod.hpp>
#include <cfloat>
#include <cmath>
#include <numbers>

#include "cgp/common/privacy/gaussian_profile.hpp"

namespace cgp::privacy::detail {
namespace {

constexpr double kLogSqrt2Pi = 0.91893853320467274178;  // log √(2π)
// Where the quadrature interval ends: the integrand is below e^-80 of its peak. h″ ≤ −1 makes
// h(m ± L) ≤ h(m) − L²/2, so L = 13 always gets there.
constexpr double kDrop = 80;
constexpr double kMaxHalfWidth = 13;
// Kronrod's relative tolerance and bisection depth: 1e-14 sits at the rounding floor of the
// integrand, where the adaptive bisection never converges and runs to its depth (2^15 panels).
constexpr double kTolerance = 1e-12;
constexpr unsigned kDepth = 10;

// For u ≤ −10: λ(u) = z + r with z = −u and r = 1/(z + 2/(z + 3/(z + …))) (Laplace's continued
// fraction of Mills' ratio, as gaussian_profile.cpp's; 60 levels reach full precision there).
double mills_remainder(double z) {
  double tail = z;
  for (int k = 60; k >= 2; --k) tail = z + k / tail;
  return 1 / tail;
}

// u + λ(u) > 0, without the cancellation of its two terms for very negative u.
double u_plus_lambda(double u) {
  if (u <= -10) return mills_remainder(-u);
  return u + inverse_mills(u);
}

struct Integrand {
  std::span<const PhiFactor> factors;

  double h(double x) const {
    double sum = -0.5 * x * x;
    for (const PhiFactor& f : factors)
      if (f.power != 0) sum += f.power * log_normal_cdf(f.alpha * x + f.beta);
    return sum;
  }
  // Σ of the terms' magnitudes: what the rounding of h(x) scales with.
  double magnitude(double x) const {
    double sum = 0.5 * x * x;
    for (const PhiFactor& f : factors)
      if (f.power != 0) sum -= f.power * log_normal_cdf(f.alpha * x + f.beta);
    return sum;
  }
  double dh(double x) const {
    double sum = -x;
    for (const PhiFactor& f : factors)
      if (f.power != 0) sum += f.power * f.alpha * inverse_mills(f.alpha * x + f.beta);
    return sum;
  }
  double d2h(double x) const {
    double sum = -1;
    for (const PhiFactor& f : factors) {
      if (f.power == 0) continue;
      const double u = f.alpha * x + f.beta;
      sum -= f.power * f.alpha * f.alpha * inverse_mills(u) * u_plus_lambda(u);
    }
    return sum;
  }
  // The derivative's weight g(x) = Σ n_k ∂β_k/∂Δ λ(u_k) and the slope bound of |g′|.
  double g(double x) const {
    double sum = 0;
    for (const PhiFactor& f : factors)
      if (f.power != 0) sum += f.power * f.dbeta * inverse_mills(f.alpha * x + f.beta);
    return sum;
  }
  double g_lipschitz() const {
    double sum = 0;
    for (const PhiFactor& f : factors) sum += f.power * std::fabs(f.dbeta * f.alpha);
    return sum;
  }
};

// The root of the strictly decreasing h′: bracket by doubling, then Newton kept inside the
// bracket (bisection when it leaves).
double mode(const Integrand& f) {
  double lo = -1, hi = 1;
  for (int i = 0; i < 1100 && f.dh(lo) < 0; ++i) lo *= 2;
  for (int i = 0; i < 1100 && f.dh(hi) > 0; ++i) hi *= 2;
  double x = 0.5 * (lo + hi);
  for (int i = 0; i < 300; ++i) {
    const double slope = f.dh(x);
    if (slope == 0) return x;
    (slope > 0 ? lo : hi) = x;
    double next = x - slope / f.d2h(x);
    if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
    if (next == x || hi - lo <= 4 * DBL_EPSILON * std::fabs(x)) return next;
    x = next;
  }
  return x;
}

}  // namespace

double inverse_mills(double u) noexcept {
  if (std::isnan(u)) return u;
  if (u <= -10) return -u + mills_remainder(-u);
  return std::exp(-0.5 * u * u - kLogSqrt2Pi - log_normal_cdf(u));
}

LogExpectation log_normal_expectation(std::span<const PhiFactor> factors, bool with_slope) {
  LogExpectation out;
  for (const PhiFactor& f : factors)
    if (!(std::isfinite(f.power) && f.power >= 0 && std::isfinite(f.alpha) &&
          std::isfinite(f.beta) && std::isfinite(f.dbeta)))
      return out;
  const Integrand f{factors};
  const double m = mode(f);
  const double peak = f.h(m);
  if (!std::isfinite(m) || !std::isfinite(peak)) return out;
  const double scale = 1 / std::sqrt(-f.d2h(m));

  // Half-widths where the integrand has dropped below e^-kDrop of its peak.
  auto reach = [&](double direction) {
    double width = std::fmin(scale, kMaxHalfWidth);
    while (width < kMaxHalfWidth && f.h(m + direction * width) - peak > -kDrop)
      width = std::fmin(width * 1.5, kMaxHalfWidth);
    return width;
  };
  const double left = reach(-1), right = reach(+1);
  const double a = m - left, b = m + right;

  using Quadrature = boost::math::quadrature::gauss_kronrod<double, 31>;
  auto weight = [&](double x) { return std::exp(f.h(x) - peak); };
  double q_error = 0;
  const double q = Quadrature::integrate(weight, a, b, kDepth, kTolerance, &q_error);
  // Concavity: beyond m + L the log integrand falls at least with slope L (h′(m) = 0, h″ ≤ −1).
  const double edge_left = std::exp(f.h(a) - peak), edge_right = std::exp(f.h(b) - peak);
  const double q_tails = edge_left / left + edge_right / right;
  // The rounding of h: a few ulps of the magnitude of its terms (largest at an end: each
  // −log Φ and x²/2 is convex), relative to the integrand.
  const double rounding =
      16 * DBL_EPSILON * (1 + std::fmax(f.magnitude(a), f.magnitude(b))) + 8 * DBL_EPSILON;
  const double q_low = q * (1 - rounding) - 2 * q_error;
  const double q_high = (q * (1 + rounding) + 2 * q_error + q_tails);
  if (!(q_low > 0) || !std::isfinite(q_high)) return out;
  const double pad = 8 * DBL_EPSILON * (std::fabs(peak) + kLogSqrt2Pi + 1);
  out.lower = peak - kLogSqrt2Pi + std::log(q_low) - rounding - pad;
  out.upper = peak - kLogSqrt2Pi + std::log(q_high) + rounding + pad;

  if (with_slope) {
    double n_error = 0;
    const double n = Quadrature::integrate([&](double x) { return weight(x) * f.g(x); }, a, b,
                                           kDepth, kTolerance, &n_error);
    const double lipschitz = f.g_lipschitz();
    const double n_tails = edge_left * (std::fabs(f.g(a)) / left + lipschitz / (left * left)) +
                           edge_right * (std::fabs(f.g(b)) / right + lipschitz / (right * right));
    const double relative = 2 * rounding + 1e-13;  // h twice, λ to ~1e-14
    const double n_low = n * (1 - relative) - 2 * n_error - n_tails;
    const double n_high = n * (1 + relative) + 2 * n_error + n_tails;
    out.slope_lower = n_low / q_high;
    out.slope_upper = n_high / q_low;
    if (!std::isfinite(out.slope_lower) || !std::isfinite(out.slope_upper)) return out;
  }
  out.ok = true;
  return out;
}

}  // namespace cgp::privacy::detail
