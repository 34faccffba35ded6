#include "cgp/coordinator/charges.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include "cgp/common/validate.hpp"

namespace cgp::coordinator {
namespace {

// Whether ids rise strictly. Blocks without an early exit, so that the compiler vectorizes the
// comparisons (std::adjacent_find's exit per element kept it to one at a time: ~3% of a 2-D kNN
// run, which checks 200,000 candidates per query).
bool strictly_ascending(const std::vector<UserId>& ids) {
  constexpr std::size_t kBlock = 1024;
  for (std::size_t first = 1; first < ids.size(); first += kBlock) {
    const std::size_t last = std::min(ids.size(), first + kBlock);
    bool falls = false;
    for (std::size_t i = first; i < last; ++i) falls |= ids[i - 1] >= ids[i];
    if (falls) return false;
  }
  return true;
}

// The least cap that is not finite and > 0, or caps.size().
std::size_t first_bad_cap(const std::vector<Charge>& caps) {
  constexpr std::size_t kBlock = 1024;
  for (std::size_t first = 0; first < caps.size(); first += kBlock) {
    const std::size_t last = std::min(caps.size(), first + kBlock);
    // Finite and positive: 0 < x ≤ max (NaN fails both); one form for both loops, branch-free.
    const auto bad = [&](std::size_t k) {
      return !(caps[k].value() > 0 && caps[k].value() <= std::numeric_limits<double>::max());
    };
    bool any = false;
    for (std::size_t k = first; k < last; ++k) any |= bad(k);
    if (!any) continue;
    for (std::size_t k = first; k < last; ++k)
      if (bad(k)) return k;
  }
  return caps.size();
}

}  // namespace

UserCharges UserCharges::everyone(Charge cap) {
  UserCharges c;
  c.everyone_ = true;
  c.caps_ = {cap};
  return c;
}

UserCharges UserCharges::uniform(Charge cap, std::vector<UserId> users) {
  UserCharges c;
  c.users_ = std::move(users);
  c.caps_ = {cap};
  return c;
}

UserCharges UserCharges::per_user(std::vector<UserId> users, std::vector<Charge> caps) {
  UserCharges c;
  c.users_ = std::move(users);
  c.caps_ = std::move(caps);
  c.uniform_ = false;
  return c;
}

Status UserCharges::validate(std::size_t fleet_size, bool allow_empty) const {
  if (fleet_size == 0 && !allow_empty)
    return make_error(ErrorCode::invalid_argument, "users", "users: the fleet is empty");
  if (!everyone_ && users_.empty() && !allow_empty)
    return make_error(ErrorCode::invalid_argument, "users",
                      "users is empty: the query asks no user");
  if (uniform_ ? caps_.size() != 1 : caps_.size() != users_.size())
    return make_error(ErrorCode::dimension_mismatch, "charge",
                      "charge must give one cap per user (" + std::to_string(users_.size()) +
                          "), got " + std::to_string(caps_.size()));
  if (uniform_) {
    CGP_RETURN_IF_ERROR(require_finite_positive("charge", caps_[0].value()));
  } else {
    if (const std::size_t k = first_bad_cap(caps_); k < caps_.size())  // named only on failure
      return require_finite_positive(indexed_name("charge", k), caps_[k].value());
  }
  if (users_.empty()) return {};
  // Strictly ascending (as a query's group, or everyone but a few, comes): in the fleet and
  // listed once without a table of the fleet's size.
  if (strictly_ascending(users_) && users_.back() < fleet_size) return {};
  std::vector<char> listed(fleet_size, 0);
  for (UserId u : users_) {
    if (u >= fleet_size)
      return make_error(ErrorCode::out_of_range, "users",
                        "users holds id " + std::to_string(u) + ", not in the fleet of " +
                            std::to_string(fleet_size));
    if (listed[u]++)
      return make_error(ErrorCode::invalid_argument, "users",
                        "users lists id " + std::to_string(u) + " twice");
  }
  return {};
}

double UserCharges::smallest_cap() const noexcept {
  double smallest = std::numeric_limits<double>::infinity();
  for (const Charge& cap : caps_) smallest = std::min(smallest, cap.value());
  return smallest;
}

std::vector<UserId> UserCharges::users(std::size_t fleet_size) const {
  if (!everyone_) return users_;
  std::vector<UserId> all(fleet_size);
  std::iota(all.begin(), all.end(), UserId{0});
  return all;
}

}  // namespace cgp::coordinator
