#include "cgp/client/statistic.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "cgp/common/geometry/signed_distance.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::client {

StatisticSpec StatisticSpec::of(const DeviceRequest& request) noexcept {
  StatisticSpec spec;
  spec.kind = request.statistic();
  spec.point = request.point();
  spec.region = request.region() ? &*request.region() : nullptr;
  return spec;
}

std::size_t StatisticSpec::required_dimension() const noexcept {
  switch (kind) {
    case StatisticKind::location:
      return 0;
    case StatisticKind::distance_to_point:
      return point.size();
    case StatisticKind::signed_distance_to_region:
      return region ? geometry::dimension(*region) : 0;
  }
  return 0;
}

double StatisticSpec::public_extent() const noexcept {
  double extent = 0;
  auto widen = [&](double v) { extent = std::max(extent, std::fabs(v)); };
  for (double v : point) widen(v);
  if (!region) return extent;
  if (const auto* box = std::get_if<geometry::Box>(region)) {
    for (double v : box->lo()) widen(v);
    for (double v : box->hi()) widen(v);
  } else if (const auto* ball = std::get_if<geometry::Ball>(region)) {
    for (double v : ball->center()) widen(std::fabs(v) + ball->radius());
  } else {
    // Every vertex of every ring is the start of one boundary edge.
    const auto& edges = std::get<geometry::Polygon>(*region).edges();
    for (std::size_t k = 0; k < edges.size(); ++k) {
      widen(edges.ax[k]);
      widen(edges.ay[k]);
    }
  }
  return extent;
}

std::size_t output_dimension(const DeviceRequest& request, std::size_t component_dimension) {
  return StatisticSpec::of(request).output_dimension(component_dimension);
}

Status check_statistic_input(const StatisticSpec& spec, std::span<const double> component) {
  if (component.empty()) {
    return make_error(ErrorCode::dimension_mismatch, "component", "the component has no value");
  }
  std::size_t required = spec.required_dimension();
  if (required != 0 && component.size() != required) {
    return make_error(ErrorCode::dimension_mismatch, "component",
                      "component has dimension " + std::to_string(component.size()) + " but the " +
                          std::string(statistic_kind_name(spec.kind)) +
                          " request needs dimension " + std::to_string(required));
  }
  return require_all_finite("component", component);
}

void evaluate_unchecked(const StatisticSpec& spec, std::span<const double> component,
                        double* out) noexcept {
  switch (spec.kind) {
    case StatisticKind::location:
      std::copy(component.begin(), component.end(), out);
      break;
    case StatisticKind::distance_to_point:
      out[0] = geometry::euclidean_distance(component, spec.point);
      break;
    case StatisticKind::signed_distance_to_region:
      out[0] = geometry::signed_distance(*spec.region, component);
      break;
  }
}

void evaluate_unchecked(const StatisticSpec& spec, const double* components, std::size_t count,
                        std::size_t d, double* out) noexcept {
  switch (spec.kind) {
    case StatisticKind::location:
      std::copy(components, components + count * d, out);
      break;
    case StatisticKind::distance_to_point:
      geometry::euclidean_distances(spec.point, components, count, out);
      break;
    case StatisticKind::signed_distance_to_region:
      geometry::signed_distances(*spec.region, components, count, out);
      break;
  }
}

Status evaluate_statistic(const DeviceRequest& request, std::span<const double> component,
                          std::vector<double>& out) {
  const StatisticSpec spec = StatisticSpec::of(request);
  CGP_RETURN_IF_ERROR(check_statistic_input(spec, component));
  out.resize(spec.output_dimension(component.size()));
  evaluate_unchecked(spec, component, out.data());
  return {};
}

}  // namespace cgp::client
