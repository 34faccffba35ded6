// The Prometheus endpoint is public (cgp/transport/metrics_endpoint.hpp); the coordinator's own
// code names it here as before.
#pragma once

#include "cgp/transport/metrics_endpoint.hpp"

namespace cgp::transport::detail {
using MetricsEndpoint = transport::MetricsEndpoint;
}  // namespace cgp::transport::detail
