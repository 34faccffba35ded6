#include "cgp/coordinator/fleet.hpp"

#include <limits>
#include <string>

#include "cgp/common/validate.hpp"

namespace cgp::coordinator {

Status validate_fleet_points(std::span<const double> points, std::size_t dimension) {
  if (auto s = require_count_in("dimension", dimension, 1, 4096); !s) return s;
  if (points.empty() || points.size() % dimension != 0) {
    return make_error(ErrorCode::dimension_mismatch, "points",
                      "points must hold n × dimension values, got " +
                          std::to_string(points.size()) + " for dimension " +
                          std::to_string(dimension));
  }
  if (points.size() / dimension > std::numeric_limits<UserId>::max())
    return make_error(ErrorCode::too_large, "points", "more users than fit a 32-bit user id");
  return require_all_finite("points", points);
}

void RoundReplies::resize(std::size_t users, std::size_t dimension) {
  output_dimension = dimension;
  kind.assign(users, ReplyKind::no_answer);
  values.assign(users * dimension, std::numeric_limits<double>::quiet_NaN());
  charged.assign(users, 0.0);
  remaining.assign(users, 0.0);
}

}  // namespace cgp::coordinator
