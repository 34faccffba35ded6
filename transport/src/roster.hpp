// The coordinator's users in enrolment order: user i is the i-th device id enrolled (at start,
// the enrolment file's order; later enrolments append). An id keeps its index for the life of
// the process, revoked or enrolled again, so that results, `users` lists and watches that name
// users by index never move to another device. One lock, its own: the main thread follows the
// enrolment file, analyst calls and /metrics read it, and none waits for a running query.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/coordinator/fleet.hpp"

namespace cgp::transport::detail {

class Roster {
 public:
  struct Enrolled {
    coordinator::UserId user = 0;
    bool new_user = false;    // appended: the next index
    bool readmitted = false;  // known and revoked before: not revoked any more
  };
  // A new id becomes the next user; a known one keeps its index and is not revoked any more.
  // Errors (nothing changes): too_large when the next index would not fit a UserId.
  Expected<Enrolled> enrol(const std::string& id);
  // The device is left out of every query planned from now on. False: revoked before, or not
  // enrolled (see find).
  bool revoke(std::string_view id);

  std::optional<coordinator::UserId> find(std::string_view id) const;
  std::size_t size() const;
  std::size_t not_revoked() const;
  // The ids of users [first, size()), in index order: who joined since a caller last looked.
  std::vector<std::string> ids_from(std::size_t first) const;
  // Revoked (1) or not (0), for users [0, count) (count ≤ size()).
  std::vector<char> revoked_flags(std::size_t count) const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> ids_;
  std::vector<char> revoked_;
  std::map<std::string, coordinator::UserId, std::less<>> index_;
  std::size_t revoked_count_ = 0;
};

}  // namespace cgp::transport::detail
