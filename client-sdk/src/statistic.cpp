#include "cgp/client/statistic.hpp"

#include <string>

#include "cgp/common/geometry/signed_distance.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::client {

std::size_t output_dimension(const DeviceRequest& request, std::size_t component_dimension) {
  return request.statistic() == StatisticKind::location ? component_dimension : 1;
}

Status evaluate_statistic(const DeviceRequest& request, std::span<const double> component,
                          std::vector<double>& out) {
  if (component.empty()) {
    return make_error(ErrorCode::dimension_mismatch, "component",
                      "component " + request.component_id() + " has no value");
  }
  std::size_t required = request.required_dimension();
  if (required != 0 && component.size() != required) {
    return make_error(ErrorCode::dimension_mismatch, "component",
                      "component " + request.component_id() + " has dimension " +
                          std::to_string(component.size()) + " but the " +
                          std::string(statistic_kind_name(request.statistic())) +
                          " request needs dimension " + std::to_string(required));
  }
  if (auto s = require_all_finite("component", component); !s) return s;
  switch (request.statistic()) {
    case StatisticKind::location:
      out.assign(component.begin(), component.end());
      break;
    case StatisticKind::distance_to_point:
      out.assign(1, geometry::euclidean_distance(component, request.point()));
      break;
    case StatisticKind::signed_distance_to_region:
      out.assign(1, geometry::signed_distance(*request.region(), component));
      break;
  }
  return {};
}

}  // namespace cgp::client
