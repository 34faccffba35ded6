// φ(x): the 1-Lipschitz statistic a request asks a device to privatize, evaluated on the
// user's own component value. The noise is added by the device's privatizer, never here.
#pragma once

#include <span>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/request.hpp"

namespace cgp::client {

// The length of φ(x) for a component of the given dimension: d for location, 1 otherwise.
std::size_t output_dimension(const DeviceRequest& request, std::size_t component_dimension);

// φ(component) for a validated request. dimension_mismatch when the component's dimension
// does not fit the request (a 3-D point for a 2-D polygon, say); not_finite for a bad value.
// Writes into `out` (resized), so a device reuses one buffer across requests.
Status evaluate_statistic(const DeviceRequest& request, std::span<const double> component,
                          std::vector<double>& out);

}  // namespace cgp::client
