// grpc.health.v1 on the coordinator's ports, bounded. Health checks need no credential (load
// balancers probe them), and gRPC's default service let anyone hold Watch streams without
// limit: 40,000 from one address took the coordinator from 58 to 778 MB. Here both methods are
// served from their headers (header_time_service.hpp): every Check and Watch is admitted by a
// StreamRegistry (caps per connection, per address, in all; a lifetime), and a refused one ends
// at once with RESOURCE_EXHAUSTED.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "grpc/health/v1/health.pb.h"
#include "header_time_service.hpp"
#include "stream_registry.hpp"

namespace cgp::transport::detail {

class HealthService final : public HeaderTimeService {
 public:
  static constexpr const char* kServiceName = "grpc.health.v1.Health";
  // A service name longer than this is INVALID_ARGUMENT (ours are ~20 bytes).
  static constexpr std::size_t kMaxServiceNameBytes = 256;
  // `refused` is told the reason of each refused call ("health-watch-address-cap", ...).
  HealthService(StreamCaps watch_caps, StreamCaps check_caps,
                std::function<void(const std::string& reason)> refused);
  // The server must be shut down before this is destroyed.
  ~HealthService() override = default;
  HealthService(const HealthService&) = delete;
  HealthService& operator=(const HealthService&) = delete;

  // "" is the server as a whole. Watchers of `service` hear the change.
  void set_serving(const std::string& service, bool serving);
  // Draining before a stop: every known service (and "") NOT_SERVING from now on, to Check and
  // to Watch (watchers hear it at once), so that load balancers take the server out while it
  // still serves everything else. Watch streams stay open; shutdown() ends them. Final.
  void drain();
  // Stopping: every service NOT_SERVING from now on (watchers hear it), then every Watch ends.
  void shutdown();
  std::size_t open_watches() const { return watches_.open(); }

 private:
  class WatchStream;
  using HealthCheckRequest = grpc::health::v1::HealthCheckRequest;
  using HealthCheckResponse = grpc::health::v1::HealthCheckResponse;
  using ServingStatus = HealthCheckResponse::ServingStatus;
  ServingStatus status_of(const std::string& service) const;  // under mutex_
  grpc::Status check(const HealthCheckRequest& request, HealthCheckResponse& response);
  // A Watch's request came: from now on it hears `service`'s changes.
  void subscribe(WatchStream& watch, const std::string& service);

  const std::function<void(const std::string&)> refused_;
  mutable std::mutex mutex_;  // the statuses and subscriptions; taken before a registry's lock
  std::map<std::string, bool, std::less<>> serving_;
  bool draining_ = false, shut_down_ = false;
  StreamRegistry watches_, checks_;
  UnaryCall<HealthCheckRequest, HealthCheckResponse>::Handler check_handler_;
};

}  // namespace cgp::transport::detail
