// grpc.health.v1 on the coordinator's ports, bounded (issue 36 item 1). Health checks need no
// credential (load balancers probe them), and gRPC's default service let anyone hold Watch
// streams without limit: 40,000 from one address took the coordinator from 58 to 778 MB. Here
// every Watch stream is admitted by a StreamRegistry (caps per connection, per address, in all;
// a lifetime), and a refused one ends at once with RESOURCE_EXHAUSTED. Check holds nothing.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"
#include "stream_registry.hpp"

namespace cgp::transport::detail {

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  // A service name longer than this is INVALID_ARGUMENT (ours are ~20 bytes).
  static constexpr std::size_t kMaxServiceNameBytes = 256;
  // `refused` is told the reason of each refused Watch ("health-watch-address-cap", ...).
  HealthService(StreamCaps caps, std::function<void(const std::string& reason)> refused);
  // The server must be shut down before this is destroyed.
  ~HealthService() override = default;
  HealthService(const HealthService&) = delete;
  HealthService& operator=(const HealthService&) = delete;

  // "" is the server as a whole. Watchers of `service` hear the change.
  void set_serving(const std::string& service, bool serving);
  // Stopping: every service NOT_SERVING from now on (watchers hear it), then every Watch ends.
  void shutdown();
  std::size_t open_watches() const { return watches_.open(); }

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override;

 private:
  class WatchStream;
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;
  ServingStatus status_of(const std::string& service) const;  // under mutex_

  const std::function<void(const std::string&)> refused_;
  mutable std::mutex mutex_;  // the statuses; taken before the registry's lock
  std::map<std::string, bool, std::less<>> serving_;
  bool shut_down_ = false;
  StreamRegistry watches_;
};

}  // namespace cgp::transport::detail
