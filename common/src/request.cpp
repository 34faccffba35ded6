#include "cgp/common/request.hpp"

#include "cgp/common/validate.hpp"
#include "cgp/common/wire/limits.hpp"

namespace cgp {

std::string_view statistic_kind_name(StatisticKind kind) noexcept {
  switch (kind) {
    case StatisticKind::location:
      return "location";
    case StatisticKind::distance_to_point:
      return "distance_to_point";
    case StatisticKind::signed_distance_to_region:
      return "signed_distance_to_region";
  }
  return "unknown";
}

double lipschitz_constant(StatisticKind kind) noexcept {
  switch (kind) {
    case StatisticKind::location:                   // identity
    case StatisticKind::distance_to_point:          // reverse triangle inequality
    case StatisticKind::signed_distance_to_region:  // Lemma 6.3
      return 1.0;
  }
  return 1.0;
}

namespace {
Status require_id_text(std::string_view parameter, const std::string& value) {
  if (value.empty())
    return make_error(ErrorCode::missing_field, parameter,
                      std::string(parameter) + " must not be empty");
  if (value.size() > wire::kMaxIdBytes)
    return make_error(ErrorCode::too_large, parameter,
                      std::string(parameter) + " has " + std::to_string(value.size()) +
                          " bytes, over the limit of " + std::to_string(wire::kMaxIdBytes));
  return {};
}
}  // namespace

Status DeviceRequest::validate_common(const RequestId& id, const std::string& component_id,
                                      double rho) {
  CGP_RETURN_IF_ERROR(require_id_text("id.query_id", id.query_id));
  if (id.round == 0)
    return make_error(ErrorCode::out_of_range, "id.round", "id.round must be >= 1, got 0");
  CGP_RETURN_IF_ERROR(require_id_text("component_id", component_id));
  return require_finite_positive("rho", rho);
}

Expected<DeviceRequest> DeviceRequest::location(RequestId id, std::string component_id,
                                                double rho) {
  CGP_RETURN_IF_ERROR(validate_common(id, component_id, rho));
  DeviceRequest request;
  request.id_ = std::move(id);
  request.component_id_ = std::move(component_id);
  request.statistic_ = StatisticKind::location;
  request.rho_ = rho;
  return request;
}

Expected<DeviceRequest> DeviceRequest::distance_to_point(RequestId id, std::string component_id,
                                                         std::vector<double> point, double rho) {
  CGP_RETURN_IF_ERROR(validate_common(id, component_id, rho));
  if (point.empty())
    return make_error(ErrorCode::missing_field, "point", "point must have at least 1 coordinate");
  if (point.size() > wire::kMaxDimension)
    return make_error(ErrorCode::too_large, "point",
                      "point has dimension " + std::to_string(point.size()) +
                          ", over the limit of " + std::to_string(wire::kMaxDimension));
  CGP_RETURN_IF_ERROR(geometry::require_public_coordinates("point", point));
  DeviceRequest request;
  request.id_ = std::move(id);
  request.component_id_ = std::move(component_id);
  request.statistic_ = StatisticKind::distance_to_point;
  request.rho_ = rho;
  request.point_ = std::move(point);
  return request;
}

Expected<DeviceRequest> DeviceRequest::signed_distance_to_region(RequestId id,
                                                                 std::string component_id,
                                                                 geometry::Region region,
                                                                 double rho) {
  CGP_RETURN_IF_ERROR(validate_common(id, component_id, rho));
  DeviceRequest request;
  request.id_ = std::move(id);
  request.component_id_ = std::move(component_id);
  request.statistic_ = StatisticKind::signed_distance_to_region;
  request.rho_ = rho;
  request.region_ = std::move(region);
  return request;
}

std::size_t DeviceRequest::required_dimension() const noexcept {
  switch (statistic_) {
    case StatisticKind::location:
      return 0;
    case StatisticKind::distance_to_point:
      return point_.size();
    case StatisticKind::signed_distance_to_region:
      return geometry::dimension(*region_);
  }
  return 0;
}

}  // namespace cgp
