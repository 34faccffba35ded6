// A charge, in ρ of CGP: what a device's filter adds to its spend and its ledger records, what
// the budget mirror subtracts, a round's reply reports and a query's report adds up per user.
// Never the asked ρ of a request (its noise parameter): charges.hpp says how the two differ.
#pragma once

#include <compare>
#include <span>
#include <vector>

namespace cgp::coordinator {

class Charge {
 public:
  constexpr Charge() noexcept = default;
  constexpr explicit Charge(double rho) noexcept : value_(rho) {}
  // The ρ a user is charged (zCDP units; never the asked ρ of a request).
  constexpr double value() const noexcept { return value_; }
  friend constexpr auto operator<=>(Charge, Charge) noexcept = default;
  // Charges of one user add up (zCDP composes by adding ρ): a query's rounds, a user's queries.
  constexpr Charge& operator+=(Charge other) noexcept {
    value_ += other.value_;
    return *this;
  }
  friend constexpr Charge operator+(Charge a, Charge b) noexcept { return a += b; }

 private:
  double value_ = 0;
};

// The values of charges, in ρ: for metrics and output that work on numbers (quantiles, JSON).
inline std::vector<double> charge_values(std::span<const Charge> charges) {
  std::vector<double> out;
  out.reserve(charges.size());
  for (Charge c : charges) out.push_back(c.value());
  return out;
}

}  // namespace cgp::coordinator
