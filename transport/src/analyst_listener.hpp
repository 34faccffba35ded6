// The analyst's own port: the Analyst API, grpc.health.v1 and server reflection on a
// listener with its own connection budget. Device connections arrive on the device port and are
// admitted against its caps, so however many devices connect (or an attacker posing as them),
// operators and health checks still get in here. Put this port where only operators reach it
// (a private interface, a firewall rule): its caps are small.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/service_type.h>

#include <functional>
#include <memory>
#include <string>

#include "cgp/common/expected.hpp"
#include "cgp/transport/gateway.hpp"

namespace cgp::transport::detail {

class ConnectionAdmission;
class HealthService;
class ReflectionService;

class AnalystListener {
 public:
  // "HOST:PORT" (port 0: any free port); TLS as the gateway's (both PEM strings or none).
  // Errors name "analyst_listen" (the address) or "tls".
  static Expected<std::unique_ptr<AnalystListener>> start(
      const std::string& address, const ConnectionLimits& limits,
      const std::string& tls_certificate_chain, const std::string& tls_private_key,
      std::unique_ptr<grpc::Service> analyst, std::function<void(const std::string&)> log);
  // Health goes NOT_SERVING, no new connection is taken, calls get 2 s to end.
  ~AnalystListener();
  AnalystListener(const AnalystListener&) = delete;
  AnalystListener& operator=(const AnalystListener&) = delete;

  int port() const noexcept;
  std::size_t open_connections() const;
  // Health says NOT_SERVING from now on; calls are served as before (a drain before the stop).
  void drain_health();

 private:
  AnalystListener() = default;
  std::unique_ptr<grpc::Service> analyst_;
  std::unique_ptr<ConnectionAdmission> admission_;
  // Health and reflection, bounded: made before the server, destroyed after it.
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<ReflectionService> reflection_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace cgp::transport::detail
