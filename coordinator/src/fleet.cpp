#include "cgp/coordinator/fleet.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::coordinator {

Status validate_fleet_points(std::span<const double> points, std::size_t dimension) {
  CGP_RETURN_IF_ERROR(require_count_in("dimension", dimension, 1, 4096));
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

Expected<DeviceRequest> device_request_for(const RoundRequest& request, std::size_t k) {
  if (k >= request.rho.size())
    return make_error(ErrorCode::dimension_mismatch, "rho", "no rho for this user");
  const RequestId id{request.query_id, request.round};
  const double rho = request.rho[k];
  switch (request.statistic) {
    case StatisticKind::location:
      return DeviceRequest::location(id, request.component_id, rho);
    case StatisticKind::distance_to_point:
      return DeviceRequest::distance_to_point(id, request.component_id,
                                              {request.point.begin(), request.point.end()}, rho);
    case StatisticKind::signed_distance_to_region:
      if (!request.region) break;
      return DeviceRequest::signed_distance_to_region(id, request.component_id, *request.region,
                                                      rho);
  }
  return make_error(ErrorCode::missing_field, "region", "the statistic needs a region");
}

void worst_case_charges(const RoundRequest& request, std::vector<double>& out) {
  out.resize(request.users.size());
  // Rounds ask most users the same ρ: its charge is computed once per run of equal ρ.
  double last_rho = 0, last_charge = 0;
  for (std::size_t k = 0; k < out.size(); ++k) {
    if (k == 0 || request.rho[k] != last_rho) {
      last_rho = request.rho[k];
      // A ρ a device rejects (not finite, not > 0) charges nothing.
      last_charge = std::isfinite(last_rho) && last_rho > 0 ? privacy::device_charge(last_rho) : 0;
    }
    out[k] = last_charge;
  }
}

void RoundReplies::resize(std::size_t users, std::size_t dimension) {
  output_dimension = dimension;
  kind.assign(users, ReplyKind::no_answer);
  values.assign(users * dimension, std::numeric_limits<double>::quiet_NaN());
  charged.assign(users, Charge{});
  remaining.assign(users, 0.0);
}

ReplyDefect record_reply(const DeviceReply& reply, std::size_t k, RoundReplies& out) noexcept {
  out.remaining[k] = reply.remaining_budget;
  switch (reply.status) {
    case ReplyStatus::answered: {
      const std::size_t dim = out.output_dimension;
      if (reply.values.size() != dim) return ReplyDefect::wrong_dimension;
      for (double v : reply.values)
        if (!std::isfinite(v)) return ReplyDefect::not_finite;
      out.kind[k] = ReplyKind::answered;
      out.charged[k] = Charge{reply.charged_rho};
      std::copy(reply.values.begin(), reply.values.end(),
                out.values.begin() + static_cast<std::ptrdiff_t>(k * dim));
      return ReplyDefect::none;
    }
    case ReplyStatus::refused_budget:
      out.kind[k] = ReplyKind::refused;
      return ReplyDefect::none;
    case ReplyStatus::rejected_invalid:
      out.kind[k] = ReplyKind::rejected;
      return ReplyDefect::none;
  }
  return ReplyDefect::none;
}

}  // namespace cgp::coordinator
