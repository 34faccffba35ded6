#include "cgp/common/device_config.hpp"

#include "cgp/common/privacy/approx_gp_filter.hpp"
#include "cgp/common/validate.hpp"

namespace cgp {

std::string_view filter_kind_name(FilterKind kind) noexcept {
  return kind == FilterKind::cgp ? "cgp" : "approximate_gp";
}

Expected<DeviceConfig> DeviceConfig::cgp(double rho_budget, bool sticky_halt) {
  if (auto s = require_finite_positive("budget", rho_budget); !s) return s.error();
  DeviceConfig config;
  config.filter_ = FilterKind::cgp;
  config.budget_ = rho_budget;
  config.rho_capacity_ = rho_budget;
  config.sticky_halt_ = sticky_halt;
  return config;
}

Expected<DeviceConfig> DeviceConfig::approximate_gp(double epsilon_budget, double delta,
                                                    double lambda, bool sticky_halt) {
  auto capacity = privacy::approx_gp_capacity(epsilon_budget, delta, lambda);
  if (!capacity) return capacity.error();
  DeviceConfig config;
  config.filter_ = FilterKind::approximate_gp;
  config.budget_ = epsilon_budget;
  config.delta_ = delta;
  config.lambda_ = lambda;
  config.rho_capacity_ = *capacity;
  config.sticky_halt_ = sticky_halt;
  return config;
}

}  // namespace cgp
