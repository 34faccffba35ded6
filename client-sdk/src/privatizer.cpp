#include "cgp/client/privatizer.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/validate.hpp"
#include "discrete_gaussian.hpp"

namespace cgp::client {
namespace {

// u ≤ 2^-kGridBits·σ: the release's own rounding is far below its noise.
constexpr int kGridBits = 24;
// u ≤ 2^-kCapacityGridBits·σ_cap: the rounding slack of every release, whatever its ρ, is paid by
// its charge at one resolution t_res (privatizer.md), so it cannot add up over many releases.
constexpr int kCapacityGridBits = 21;
// ρ ≥ capacity·2^-kMinRhoBits keeps σ²/u² < 2^(2·kCapacityGridBits + 2 + kMinRhoBits) = 2^62,
// the exact sampler's range, and bounds the number of releases by 2^18.
constexpr int kMinRhoBits = privacy::kMinRhoBits;  // the public rule (device_charge.hpp)
// Inputs are clamped to ±2^kClampBits·u; φ is clamped to ±2^kPhiBits·u, which φ of clamped
// inputs never reaches (≤ 2√d·2^kClampBits·u = 2^55·u at d = 4096), so the second clamp only
// makes "answered" independent of the data by construction.
constexpr int kClampBits = 48;
constexpr int kPhiBits = 56;

// 2^e for a normal-range e (plans keep |grid_exponent| ≤ 950), built from its bits: exact, as
// ldexp(1, e) is, without a library call per release.
double power_of_two(int e) noexcept {
  if (e < -1022 || e > 1023) return std::ldexp(1.0, e);  // not from plan_noise
  return std::bit_cast<double>(static_cast<std::uint64_t>(1023 + e) << 52);
}

// The exponent e with x ∈ [2^(e−1), 2^e), for x > 0 finite.
int binary_exponent(double x) {
  int e;
  std::frexp(x, &e);
  return e;
}

// x = mantissa·2^exponent exactly, mantissa an integer with |mantissa| < 2^53.
void exact_parts(double x, std::int64_t& mantissa, int& exponent) {
  int e;
  double m = std::frexp(x, &e);                      // x = m·2^e, 0.5 ≤ |m| < 1
  mantissa = static_cast<std::int64_t>(m * 0x1p53);  // exact: |m·2^53| < 2^53
  exponent = e - 53;
}

// Bits needed for x (0 for 0).
int bit_length(uint128 x) {
  const std::uint64_t high = high64(x);
  const std::uint64_t low = low64(x);
  if (high != 0) return 128 - __builtin_clzll(high);
  return low != 0 ? 64 - __builtin_clzll(low) : 0;
}

// Whether left·2^shift ≥ right, exactly, for left, right < 2^127: a side pushed to 128 bits or
// more is larger than the other whatever it holds, and otherwise the shift fits in 128 bits.
bool shifted_at_least(uint128 left, uint128 right, int shift) {
  if (shift >= 0) {
    if (left == 0) return right == 0;
    if (bit_length(left) + shift >= 128) return true;
    return (left << shift) >= right;
  }
  if (right == 0) return true;
  if (bit_length(right) - shift >= 128) return false;
  return left >= (right << -shift);
}

// Whether S·2ρu² ≥ K² holds exactly, i.e. the noise S·u² is at least K²/(2ρ):
// S·ρm·2^(1+ρe+2g−2Ke) ≥ Km² (S < 2^64, ρm < 2^53, Km < 2^53: both sides below 2^117).
bool covers(std::uint64_t s, std::int64_t rho_m, int rho_e, std::int64_t k_m, int k_e, int grid) {
  const uint128 left = static_cast<uint128>(s) * static_cast<std::uint64_t>(rho_m);
  const uint128 right =
      static_cast<uint128>(static_cast<std::uint64_t>(k_m)) * static_cast<std::uint64_t>(k_m);
  return shifted_at_least(left, right, 1 + rho_e + 2 * grid - 2 * k_e);
}

// Whether u = 2^grid satisfies u² ≤ 2^-2·kCapacityGridBits·K²/(2·capacity) exactly, i.e.
// cap_m·2^(cap_e + 2·grid + 1 + 2·kCapacityGridBits) ≤ K_m²·2^(2·K_e).
bool within_capacity_grid(int grid, std::int64_t cap_m, int cap_e, std::int64_t k_m, int k_e) {
  const uint128 k2 =
      static_cast<uint128>(static_cast<std::uint64_t>(k_m)) * static_cast<std::uint64_t>(k_m);
  const int shift = cap_e + 2 * grid + 1 + 2 * kCapacityGridBits - 2 * k_e;
  return shifted_at_least(k2, uint128(static_cast<std::uint64_t>(cap_m)), -shift);
}

// The largest g with 2^g ≤ 2^-kCapacityGridBits·σ_cap, decided exactly (a double estimate of
// σ_cap can sit one ulp on the wrong side of a power of two).
int capacity_grid_exponent(double lipschitz, double capacity) {
  std::int64_t cap_m, k_m;
  int cap_e, k_e;
  exact_parts(capacity, cap_m, cap_e);
  exact_parts(lipschitz, k_m, k_e);
  int grid = binary_exponent(lipschitz / std::sqrt(2 * capacity)) - 1 - kCapacityGridBits;
  while (!within_capacity_grid(grid, cap_m, cap_e, k_m, k_e)) --grid;
  while (within_capacity_grid(grid + 1, cap_m, cap_e, k_m, k_e)) ++grid;
  return grid;
}

}  // namespace

double NoisePlan::grid() const noexcept {
  return power_of_two(grid_exponent);
}
double NoisePlan::grid_scale() const noexcept {
  return power_of_two(-grid_exponent);
}
double NoisePlan::sigma() const noexcept {
  return std::sqrt(static_cast<double>(sigma2_grid)) * grid();
}

double min_rho(double capacity) noexcept {
  return privacy::min_rho(capacity);
}

double resolution(double capacity, std::size_t output_dimension, double float_error_grid_units) {
  const double s_d = std::sqrt(static_cast<double>(output_dimension)) + 2 * float_error_grid_units;
  // t_res = 2^10·s_d·u/K with u ≤ 2^-21·K/√(2·capacity).
  return std::ldexp(s_d, 10 - kCapacityGridBits) / std::sqrt(2 * capacity);
}

Expected<NoisePlan> plan_noise(double lipschitz, double rho, double capacity) {
  CGP_RETURN_IF_ERROR(require_finite_positive("lipschitz", lipschitz));
  CGP_RETURN_IF_ERROR(require_finite_positive("rho", rho));
  CGP_ASSIGN_OR_RETURN(auto planner, NoisePlanner::create(lipschitz, capacity));
  return planner.plan(rho);
}

Expected<NoisePlanner> NoisePlanner::create(double lipschitz, double capacity) {
  CGP_RETURN_IF_ERROR(require_finite_positive("lipschitz", lipschitz));
  CGP_RETURN_IF_ERROR(require_finite_positive("capacity", capacity));
  NoisePlanner planner;
  planner.lipschitz_ = lipschitz;
  planner.capacity_ = capacity;
  planner.min_rho_ = min_rho(capacity);
  const double sigma_cap = lipschitz / std::sqrt(2 * capacity);
  planner.capacity_noise_ok_ = std::isfinite(sigma_cap) && sigma_cap > 0;
  exact_parts(lipschitz, planner.k_mantissa_, planner.k_exponent_);
  // Only plans with a usable σ_cap read it (plan() refuses the others first).
  if (planner.capacity_noise_ok_)
    planner.capacity_grid_ = capacity_grid_exponent(lipschitz, capacity);
  return planner;
}

Expected<NoisePlan> NoisePlanner::plan(double rho) const {
  CGP_RETURN_IF_ERROR(require_finite_positive("rho", rho));
  if (rho < min_rho_) {
    return make_error(ErrorCode::out_of_range, "rho",
                      "rho = " + format_number(rho) + " is below this device's minimum " +
                          format_number(min_rho_) + " (capacity " + format_number(capacity_) +
                          " / 2^18)");
  }
  const double sigma = lipschitz_ / std::sqrt(2 * rho);
  if (!(std::isfinite(sigma) && sigma > 0 && capacity_noise_ok_)) {
    return make_error(ErrorCode::out_of_range, "rho",
                      "rho = " + format_number(rho) + " gives no usable noise scale");
  }
  NoisePlan plan;
  plan.grid_exponent = std::min(binary_exponent(sigma) - 1 - kGridBits, capacity_grid_);
  // Grid units must stay well inside double's range for the ±2^56 window around them.
  if (plan.grid_exponent < -950 || plan.grid_exponent > 900) {
    return make_error(ErrorCode::out_of_range, "rho",
                      "rho = " + format_number(rho) + " is outside the supported range");
  }
  // The least integer S with S·u² ≥ K²/(2ρ), exactly (a double estimate, then exact checks).
  std::int64_t rho_m;
  int rho_e;
  exact_parts(rho, rho_m, rho_e);
  // σ·2^-e, exactly as ldexp gives it: |e| ≤ 950 keeps 2^-e normal, and σ ≥ 2^(e+24) keeps
  // the product normal (an overflow is ∞ either way, refused below).
  const double estimate = sigma * power_of_two(-plan.grid_exponent);
  if (!(estimate * estimate < 0x1p62)) {
    return make_error(ErrorCode::out_of_range, "rho",
                      "rho = " + format_number(rho) + " needs a noise grid finer than supported");
  }
  auto s = static_cast<std::uint64_t>(std::ceil(estimate * estimate));
  while (!covers(s, rho_m, rho_e, k_mantissa_, k_exponent_, plan.grid_exponent)) ++s;
  while (s > 1 && covers(s - 1, rho_m, rho_e, k_mantissa_, k_exponent_, plan.grid_exponent)) --s;
  // Creating the sampler here means a release can no longer fail once admitted.
  CGP_RETURN_IF_ERROR(DiscreteGaussian::create(s));
  plan.sigma2_grid = s;
  plan.charged_rho = privacy::device_charge(rho);
  plan.coordinate_limit = power_of_two(plan.grid_exponent + kClampBits);
  return plan;
}

Expected<NoisePlan> plan_release(const StatisticSpec& spec, double rho, double capacity) {
  CGP_ASSIGN_OR_RETURN(auto plan, plan_noise(lipschitz_constant(spec.kind), rho, capacity));
  if (!plan_covers(plan, spec.public_extent())) {
    return make_error(ErrorCode::out_of_range, "rho",
                      "rho = " + format_number(rho) +
                          " is too large for the coordinates of this request (limit " +
                          format_number(plan.coordinate_limit) +
                          "): use a smaller rho or coordinates centred near the origin");
  }
  return plan;
}

namespace {

// x rounded to the nearest integer, halves away from zero — std::llround's rule — for
// |x| < 2^62, inline (std::llround is a library call, and this runs once per released value).
long long round_half_away(double x) noexcept {
  const auto whole = static_cast<long long>(x);            // toward zero
  const double fraction = x - static_cast<double>(whole);  // exact: both share x's exponent range
  return whole + static_cast<long long>(fraction >= 0.5) - static_cast<long long>(fraction <= -0.5);
}

// φ on the grid: exact (scale = 2^-grid_exponent is a power of two, so φ·scale is ldexp(φ, −e));
// the clamp is part of the statistic (1-Lipschitz) and sends a NaN to the lower bound (as
// fmin(fmax(·)) would) instead of to undefined behaviour in the conversion.
long long grid_units(double phi, double scale) noexcept {
  constexpr double phi_limit = 0x1p56;
  static_assert(phi_limit == static_cast<double>(1LL << kPhiBits));
  double v = phi * scale;
  v = v > -phi_limit ? v : -phi_limit;
  v = v < phi_limit ? v : phi_limit;
  return round_half_away(v);
}

}  // namespace

void privatize_with_normals(std::span<const double> phi, const NoisePlan& plan,
                            std::span<const double> z, std::span<double> out) noexcept {
  const double sigma_grid = std::sqrt(static_cast<double>(plan.sigma2_grid));
  const double scale = plan.grid_scale();
  const double u = plan.grid();  // a power of two: multiplying by it is exact, as ldexp is
  const std::size_t n = std::min({phi.size(), z.size(), out.size()});  // equal by contract
  for (std::size_t i = 0; i < n; ++i) {
    // |φ| ≤ 2^56 grid units and |σ·z| < 2^37 (σ ≤ 2^31, |z| < 40): the sum fits 64 bits.
    const long long noisy = grid_units(phi[i], scale) + round_half_away(sigma_grid * z[i]);
    out[i] = static_cast<double>(noisy) * u;
  }
}

Status privatize(std::span<const double> phi, const NoisePlan& plan, RandomBits& bits,
                 std::vector<double>& out) {
  CGP_ASSIGN_OR_RETURN(auto gaussian, DiscreteGaussian::create(plan.sigma2_grid));
  out.resize(phi.size());
  const double scale = plan.grid_scale();
  for (std::size_t i = 0; i < phi.size(); ++i) {
    const auto rounded = static_cast<int128>(grid_units(phi[i], scale));
    const int128 noisy = rounded + gaussian.sample(bits);
    // Integer -> double rounds (beyond 2^53) deterministically: post-processing of the
    // integer release, so it cannot leak anything about φ.
    out[i] = std::ldexp(to_double(noisy), plan.grid_exponent);
  }
  return {};
}

std::span<const double> release_input(const StatisticSpec& spec, std::span<const double> component,
                                      const NoisePlan& plan, ReleaseScratch& scratch) {
  const double limit = input_limit(spec, plan);
  scratch.clamped.resize(component.size());
  for (std::size_t k = 0; k < component.size(); ++k)
    scratch.clamped[k] = std::clamp(component[k], -limit, limit);
  scratch.phi.resize(spec.output_dimension(component.size()));
  evaluate_unchecked(spec, scratch.clamped, scratch.phi.data());
  return scratch.phi;
}

Status release_statistic(const StatisticSpec& spec, std::span<const double> component,
                         const NoisePlan& plan, RandomBits& bits, ReleaseScratch& scratch,
                         std::vector<double>& out) {
  return privatize(release_input(spec, component, plan, scratch), plan, bits, out);
}

}  // namespace cgp::client
