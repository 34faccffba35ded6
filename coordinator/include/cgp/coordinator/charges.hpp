// The one unit of every public query API: a charge, in ρ of CGP — what a device's filter adds to
// its spend and its ledger records, what the budget mirror subtracts and a budget plan divides.
//
// A release is asked at a slightly smaller ρ, its noise parameter (σ = 1/√(2ρ); the device
// charges privacy::device_charge(ρ) for it, which pays for its grid). The engine turns a charge
// into that ρ in one place (elimination.cpp, privacy::rho_within_charge); no public query
// signature takes it, and the strong type keeps the two from being mixed. docs/design.md §4
// traces a charge from the analyst to the ledger.
#pragma once

#include <compare>
#include <cstddef>
#include <span>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/coordinator/charge.hpp"
#include "cgp/coordinator/fleet.hpp"

namespace cgp::coordinator {

// Whom a query asks and the most it may charge each of them, over the whole query (all its
// rounds). Sparse: only the users asked.
class UserCharges {
 public:
  // Every user of the fleet, each charged at most `cap`.
  static UserCharges everyone(Charge cap);
  // The listed users (each at most once), each charged at most `cap`.
  static UserCharges uniform(Charge cap, std::vector<UserId> users);
  // users[k] charged at most caps[k] (Alg. 3's per-user allocations).
  static UserCharges per_user(std::vector<UserId> users, std::vector<Charge> caps);

  bool is_everyone() const noexcept { return everyone_; }
  // The users listed; empty when is_everyone().
  std::span<const UserId> listed() const noexcept { return users_; }
  // The cap of listed()[k], or of every user when the cap is uniform.
  Charge cap(std::size_t k) const noexcept { return uniform_ ? caps_[0] : caps_[k]; }
  bool is_uniform() const noexcept { return uniform_; }
  // The smallest cap (ρ); +∞ when there is none (nobody listed, or not yet valid).
  double smallest_cap() const noexcept;

  // For a fleet of `fleet_size`: ids in the fleet and listed once, one cap per listed user,
  // every cap finite and > 0, at least one user (allow_empty: none is fine, as on one shard of
  // a sharded fleet). Errors name "users", "charge" or "charge[k]".
  Status validate(std::size_t fleet_size, bool allow_empty = false) const;
  // The users asked (G₀) in order: the listed ones, or 0 .. fleet_size − 1.
  std::vector<UserId> users(std::size_t fleet_size) const;

 private:
  bool everyone_ = false;
  bool uniform_ = true;
  std::vector<UserId> users_;
  std::vector<Charge> caps_;
};

}  // namespace cgp::coordinator
