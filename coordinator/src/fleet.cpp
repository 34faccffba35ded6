#include "cgp/coordinator/fleet.hpp"

#include <limits>

namespace cgp::coordinator {

void RoundReplies::resize(std::size_t users, std::size_t dimension) {
  output_dimension = dimension;
  kind.assign(users, ReplyKind::no_answer);
  values.assign(users * dimension, std::numeric_limits<double>::quiet_NaN());
  charged.assign(users, 0.0);
  remaining.assign(users, 0.0);
}

}  // namespace cgp::coordinator
