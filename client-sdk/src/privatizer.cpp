#include "cgp/client/privatizer.hpp"

#include <algorithm>
#include <boost/multiprecision/cpp_int.hpp>
#include <cmath>
#include <string>

#include "cgp/client/discrete_gaussian.hpp"
#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::client {
namespace {

using BigInt = boost::multiprecision::int256_t;  // the shift in covers() is a few bits

// σ/u ∈ [2^kGridBits, 2^(kGridBits+1)).
constexpr int kGridBits = 24;
// Inputs are clamped to ±2^kClampBits·u; φ of clamped inputs stays within ±2^kPhiBits·u.
constexpr int kClampBits = 48;
constexpr int kPhiBits = 54;

// x = mantissa·2^exponent exactly, mantissa an integer with |mantissa| < 2^53.
void exact_parts(double x, std::int64_t& mantissa, int& exponent) {
  int e;
  double m = std::frexp(x, &e);  // x = m·2^e, 0.5 ≤ |m| < 1
  mantissa = static_cast<std::int64_t>(std::ldexp(m, 53));
  exponent = e - 53;
}

// Whether S·2ρu² ≥ K² holds exactly, i.e. the noise S·u² is at least K²/(2ρ).
bool covers(std::uint64_t s, std::int64_t rho_m, int rho_e, std::int64_t k_m, int k_e, int grid) {
  // S·2·ρm·2^ρe·2^(2g) ≥ Km²·2^(2Ke)  ⇔  S·ρm·2^(1+ρe+2g−2Ke) ≥ Km².
  int shift = 1 + rho_e + 2 * grid - 2 * k_e;
  // Fast path: S < 2^53, ρm < 2^53, Km² < 2^106, and the shift is a few bits, so 128 bits do.
  if (s < (std::uint64_t{1} << 53) && shift >= -20 && shift <= 20) {
    const uint128 left = static_cast<uint128>(s) * static_cast<std::uint64_t>(rho_m);
    const uint128 right =
        static_cast<uint128>(static_cast<std::uint64_t>(k_m)) * static_cast<std::uint64_t>(k_m);
    return shift >= 0 ? (left << shift) >= right : left >= (right << -shift);
  }
  BigInt left = BigInt(s) * BigInt(rho_m);
  BigInt right = BigInt(k_m) * BigInt(k_m);
  if (shift >= 0)
    left <<= shift;
  else
    right <<= -shift;
  return left >= right;
}

}  // namespace

double NoisePlan::grid() const noexcept {
  return std::ldexp(1.0, grid_exponent);
}
double NoisePlan::sigma() const noexcept {
  return std::sqrt(static_cast<double>(sigma2_grid)) * grid();
}

Expected<NoisePlan> plan_noise(double lipschitz, double rho) {
  if (auto s = require_finite_positive("lipschitz", lipschitz); !s) return s.error();
  if (auto s = require_finite_positive("rho", rho); !s) return s.error();
  const double sigma = lipschitz / std::sqrt(2 * rho);
  if (!(std::isfinite(sigma) && sigma > 0)) {
    return make_error(ErrorCode::out_of_range, "rho",
                      "rho = " + format_number(rho) + " gives no usable noise scale");
  }
  int sigma_exponent;
  std::frexp(sigma, &sigma_exponent);  // σ ∈ [2^(e−1), 2^e)
  NoisePlan plan;
  plan.grid_exponent = sigma_exponent - 1 - kGridBits;
  // Grid units must stay well inside double's range for the ±2^50 window around them.
  if (plan.grid_exponent < -1000 || plan.grid_exponent > 900) {
    return make_error(ErrorCode::out_of_range, "rho",
                      "rho = " + format_number(rho) + " is outside the supported range");
  }
  // The least integer S with S·u² ≥ K²/(2ρ), exactly (a double estimate, then exact checks).
  std::int64_t rho_m, k_m;
  int rho_e, k_e;
  exact_parts(rho, rho_m, rho_e);
  exact_parts(lipschitz, k_m, k_e);
  const double estimate = std::ldexp(sigma, -plan.grid_exponent);
  auto s = static_cast<std::uint64_t>(std::ceil(estimate * estimate));
  while (!covers(s, rho_m, rho_e, k_m, k_e, plan.grid_exponent)) ++s;
  while (s > 1 && covers(s - 1, rho_m, rho_e, k_m, k_e, plan.grid_exponent)) --s;
  plan.sigma2_grid = s;
  plan.charged_rho = privacy::device_charge(rho);
  plan.coordinate_limit = std::ldexp(1.0, plan.grid_exponent + kClampBits);
  return plan;
}

Status privatize(std::span<const double> phi, const NoisePlan& plan, RandomBits& bits,
                 std::vector<double>& out) {
  auto gaussian = DiscreteGaussian::create(plan.sigma2_grid);
  if (!gaussian) return gaussian.error();
  const double phi_limit = std::ldexp(1.0, kPhiBits);
  out.resize(phi.size());
  for (std::size_t i = 0; i < phi.size(); ++i) {
    const double in_grid_units = std::ldexp(phi[i], -plan.grid_exponent);  // exact
    if (!(std::fabs(in_grid_units) <= phi_limit)) {
      return make_error(ErrorCode::out_of_range, indexed_name("phi", i),
                        "the statistic is too large for the noise grid of rho");
    }
    const auto rounded = static_cast<int128>(std::llround(in_grid_units));
    const int128 noisy = rounded + gaussian->sample(bits);
    // Integer -> double rounds (beyond 2^53) deterministically: post-processing of the
    // integer release, so it cannot leak anything about φ.
    out[i] = std::ldexp(static_cast<double>(noisy), plan.grid_exponent);
  }
  return {};
}

Status release_statistic(const StatisticSpec& spec, std::span<const double> component,
                         const NoisePlan& plan, RandomBits& bits, ReleaseScratch& scratch,
                         std::vector<double>& out) {
  // Clamping to the grid's box is 1-Lipschitz (a projection onto a convex set) and keeps the
  // floating-point error of φ far below the grid (privatizer.md).
  scratch.clamped.resize(component.size());
  for (std::size_t k = 0; k < component.size(); ++k)
    scratch.clamped[k] = std::clamp(component[k], -plan.coordinate_limit, plan.coordinate_limit);
  scratch.phi.resize(spec.output_dimension(component.size()));
  evaluate_unchecked(spec, scratch.clamped, scratch.phi.data());
  return privatize(scratch.phi, plan, bits, out);
}

}  // namespace cgp::client
