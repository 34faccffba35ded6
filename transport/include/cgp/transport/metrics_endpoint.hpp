// A Prometheus endpoint (text format, GET /metrics) on a port of its own, so that scraping needs
// no credential and never shares the devices' port: the single-process coordinator's, a
// gateway's (cgp-gateway --metrics-listen) and the round driver's (cgp-coordinator cluster
// --metrics-listen). Metrics are
// prometheus-cpp's, served by our own Beast server (metrics_http_server.hpp: idle sockets cannot
// stall a scrape); the gateway's counters are read at scrape time, so nothing is counted twice.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "cgp/common/expected.hpp"
#include "cgp/transport/gateway.hpp"

namespace cgp::transport {

class MetricsEndpoint {
 public:
  // Read at scrape time. Without `counters` (a process that holds no devices: the round
  // driver) only the process's start time and its queries are exported; each source may be
  // empty.
  struct Sources {
    std::function<GatewayCounters()> counters;
    std::function<std::size_t()> connected_devices;
    std::function<std::size_t()> enrolled_devices;
  };
  // "HOST:PORT" (port 0: any free port). Errors name "metrics_listen".
  static Expected<std::unique_ptr<MetricsEndpoint>> start(const std::string& address,
                                                          Sources sources);
  ~MetricsEndpoint();
  int port() const noexcept;
  // One finished analyst query: its kind (range, kde, knn, threshold), whether it gave a valid
  // result, and its wall time; outcome "valid", "incomplete", or "degraded" (the live tier: a
  // gateway was lost mid-query).
  void observe_query(std::string_view kind, bool valid, double seconds, bool degraded = false);

  struct State;

 private:
  explicit MetricsEndpoint(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace cgp::transport
