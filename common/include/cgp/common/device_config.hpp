// A device's privacy filter settings, chosen when the device is created (DESIGN §2).
#pragma once

#include <string_view>

#include "cgp/common/expected.hpp"

namespace cgp {

enum class FilterKind {
  cgp,             // Σρ ≤ budget (Alg. 1, eq. (7), Thm 4.4)
  approximate_gp,  // eq. (10) with (budget = ε, δ, Λ) (Thm 4.5)
};

std::string_view filter_kind_name(FilterKind kind) noexcept;

class DeviceConfig {
 public:
  // Σρ ≤ rho_budget.
  static Expected<DeviceConfig> cgp(double rho_budget, bool sticky_halt = false);
  // (ε, δ, Λ)-GP through the filter of eq. (10).
  static Expected<DeviceConfig> approximate_gp(double epsilon_budget, double delta, double lambda,
                                               bool sticky_halt = false);

  FilterKind filter() const noexcept { return filter_; }
  double budget() const noexcept { return budget_; }
  double delta() const noexcept { return delta_; }    // approximate_gp only
  double lambda() const noexcept { return lambda_; }  // approximate_gp only
  bool sticky_halt() const noexcept { return sticky_halt_; }

  // The pure ex-post budget (ε per unit distance) for gaussian_expost watches, kept apart from
  // the CGP filter: a realised ex-post loss cannot be charged to a Rényi filter as ε²/2
  // (ERRATA, design notes). 0, the default, refuses such watches.
  double expost_epsilon() const noexcept { return expost_epsilon_; }
  // This configuration with an ex-post budget; ε finite and ≥ 0 (0 turns it off).
  Expected<DeviceConfig> with_expost_epsilon(double epsilon) const;

  // The total ρ the filter lets through: the budget itself for CGP, the capacity R* of eq. (10)
  // (rounded down) for approximate GP. Computed once at creation.
  double rho_capacity() const noexcept { return rho_capacity_; }

 private:
  FilterKind filter_ = FilterKind::cgp;
  double budget_ = 0, delta_ = 0, lambda_ = 0, rho_capacity_ = 0, expost_epsilon_ = 0;
  bool sticky_halt_ = false;
};

}  // namespace cgp
