#include "roster.hpp"

#include <algorithm>
#include <limits>

#include "cgp/common/validate.hpp"

namespace cgp::transport::detail {

Expected<Roster::Enrolled> Roster::enrol(const std::string& id) {
  std::lock_guard lock(mutex_);
  if (auto known = index_.find(id); known != index_.end()) {
    const coordinator::UserId user = known->second;
    const bool was_revoked = revoked_[user] != 0;
    if (was_revoked) {
      revoked_[user] = 0;
      --revoked_count_;
    }
    return Enrolled{user, false, was_revoked};
  }
  if (ids_.size() >= std::numeric_limits<coordinator::UserId>::max())
    return make_error(ErrorCode::too_large, "devices", "devices: too many devices");
  const auto user = static_cast<coordinator::UserId>(ids_.size());
  ids_.push_back(id);
  revoked_.push_back(0);
  index_.emplace(id, user);
  return Enrolled{user, true, false};
}

bool Roster::revoke(std::string_view id) {
  std::lock_guard lock(mutex_);
  auto known = index_.find(id);
  if (known == index_.end() || revoked_[known->second] != 0) return false;
  revoked_[known->second] = 1;
  ++revoked_count_;
  return true;
}

std::optional<coordinator::UserId> Roster::find(std::string_view id) const {
  std::lock_guard lock(mutex_);
  auto known = index_.find(id);
  if (known == index_.end()) return std::nullopt;
  return known->second;
}

std::size_t Roster::size() const {
  std::lock_guard lock(mutex_);
  return ids_.size();
}

std::size_t Roster::not_revoked() const {
  std::lock_guard lock(mutex_);
  return ids_.size() - revoked_count_;
}

std::vector<std::string> Roster::ids_from(std::size_t first) const {
  std::lock_guard lock(mutex_);
  if (first >= ids_.size()) return {};
  return {ids_.begin() + static_cast<std::ptrdiff_t>(first), ids_.end()};
}

std::vector<char> Roster::revoked_flags(std::size_t count) const {
  std::lock_guard lock(mutex_);
  count = std::min(count, revoked_.size());
  return {revoked_.begin(), revoked_.begin() + static_cast<std::ptrdiff_t>(count)};
}

}  // namespace cgp::transport::detail
