#include "cgp/common/device_config.hpp"

#include "cgp/common/privacy/approx_gp_filter.hpp"
#include "cgp/common/validate.hpp"

namespace cgp {
namespace {

// The total ρ a filter may let through: far beyond any meaningful budget either way, and small
// enough that a device's noise grid and the floating-point error of its statistics stay within
// the bounds of client-sdk/src/privatizer.md.
constexpr double kMinCapacity = 0x1p-100, kMaxCapacity = 0x1p100;

Status require_capacity(double capacity) {
  if (capacity >= kMinCapacity && capacity <= kMaxCapacity) return {};
  return make_error(ErrorCode::out_of_range, "budget",
                    "budget gives a total rho of " + format_number(capacity) +
                        ", outside the supported [2^-100, 2^100]");
}

}  // namespace

std::string_view filter_kind_name(FilterKind kind) noexcept {
  return kind == FilterKind::cgp ? "cgp" : "approximate_gp";
}

Expected<DeviceConfig> DeviceConfig::cgp(double rho_budget, bool sticky_halt) {
  CGP_RETURN_IF_ERROR(require_finite_positive("budget", rho_budget));
  CGP_RETURN_IF_ERROR(require_capacity(rho_budget));
  DeviceConfig config;
  config.filter_ = FilterKind::cgp;
  config.budget_ = rho_budget;
  config.rho_capacity_ = rho_budget;
  config.sticky_halt_ = sticky_halt;
  return config;
}

Expected<DeviceConfig> DeviceConfig::approximate_gp(double epsilon_budget, double delta,
                                                    double lambda, bool sticky_halt) {
  CGP_ASSIGN_OR_RETURN(auto capacity, privacy::approx_gp_capacity(epsilon_budget, delta, lambda));
  CGP_RETURN_IF_ERROR(require_capacity(capacity));
  DeviceConfig config;
  config.filter_ = FilterKind::approximate_gp;
  config.budget_ = epsilon_budget;
  config.delta_ = delta;
  config.lambda_ = lambda;
  config.rho_capacity_ = capacity;
  config.sticky_halt_ = sticky_halt;
  return config;
}

Expected<DeviceConfig> DeviceConfig::with_expost_epsilon(double epsilon) const {
  CGP_RETURN_IF_ERROR(require_finite("expost_epsilon", epsilon));
  if (!(epsilon >= 0 && epsilon <= 0x1p30))
    return make_error(ErrorCode::out_of_range, "expost_epsilon",
                      "expost_epsilon must lie in [0, 2^30], got " + format_number(epsilon));
  DeviceConfig config = *this;
  config.expost_epsilon_ = epsilon;
  return config;
}

}  // namespace cgp
