// φ(x): the 1-Lipschitz statistic a request asks a device to privatize, evaluated on the
// user's own component value. The noise is added by the device's privatizer, never here.
#pragma once

#include <span>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/region.hpp"
#include "cgp/common/request.hpp"

namespace cgp::client {

// A statistic without a request object, for hot loops: the kind plus the query's point or
// region, borrowed from whoever owns them.
struct StatisticSpec {
  StatisticKind kind = StatisticKind::location;
  std::span<const double> point;             // distance_to_point
  const geometry::Region* region = nullptr;  // signed_distance_to_region

  static StatisticSpec of(const DeviceRequest& request) noexcept;
  // The component dimension this statistic needs, 0 for any (location).
  std::size_t required_dimension() const noexcept;
  // The largest |coordinate| the request itself names (query point, region vertices, a ball's
  // centre ± radius): public data, checked against the noise grid's box before any release.
  double public_extent() const noexcept;
  std::size_t output_dimension(std::size_t component_dimension) const noexcept {
    return kind == StatisticKind::location ? component_dimension : 1;
  }
};

// dimension_mismatch / not_finite for a component this statistic cannot be evaluated on.
Status check_statistic_input(const StatisticSpec& spec, std::span<const double> component);

// φ(component) into out[0 .. output_dimension): no checks, no allocation.
void evaluate_unchecked(const StatisticSpec& spec, std::span<const double> component,
                        double* out) noexcept;
// The same for `count` components of dimension d stored one after another, φ(component i)
// into out[i·output_dimension(d), ...): one dispatch per call, the same bits as one at a time.
void evaluate_unchecked(const StatisticSpec& spec, const double* components, std::size_t count,
                        std::size_t d, double* out) noexcept;

// The length of φ(x) for a component of the given dimension: d for location, 1 otherwise.
std::size_t output_dimension(const DeviceRequest& request, std::size_t component_dimension);

// φ(component) for a validated request. dimension_mismatch when the component's dimension
// does not fit the request (a 3-D point for a 2-D polygon, say); not_finite for a bad value.
// Writes into `out` (resized), so a device reuses one buffer across requests.
Status evaluate_statistic(const DeviceRequest& request, std::span<const double> component,
                          std::vector<double>& out);

}  // namespace cgp::client
