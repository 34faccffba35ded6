#include "analyst_listener.hpp"

#include "cgp/common/validate.hpp"
#include "cgp/protocol/log_format.hpp"
#include "cgp/v1/analyst.grpc.pb.h"
#include "connection_admission.hpp"
#include "health_service.hpp"
#include "reflection_service.hpp"
#include "refusal_log.hpp"
#include "server_setup.hpp"

namespace cgp::transport::detail {

Expected<std::unique_ptr<AnalystListener>> AnalystListener::start(
    const std::string& address, const ConnectionLimits& limits,
    const std::string& tls_certificate_chain, const std::string& tls_private_key,
    std::unique_ptr<grpc::Service> analyst, std::function<void(const std::string&)> log) {
  auto credentials = server_credentials(tls_certificate_chain, tls_private_key);
  if (!credentials) return credentials.error();
  // Refusals rate-limited as on the device port (refusal_log.hpp).
  auto refusals = std::make_shared<RefusalLog>(log);
  auto admission =
      ConnectionAdmission::listen(address, limits, log, [refusals](ConnectionRefusal why) {
        const char* reason = why == ConnectionRefusal::total_cap     ? "analyst-total-cap"
                             : why == ConnectionRefusal::address_cap ? "analyst-address-cap"
                                                                     : "analyst-descriptors";
        refusals->refused(reason, std::string("event=refused port=analyst reason=") + reason);
      });
  if (!admission) {
    Error error = admission.error();
    if (error.parameter == "listen") {
      error.parameter = "analyst_listen";
      error.message = "analyst_" + error.message;
    }
    return error;
  }
  std::unique_ptr<AnalystListener> out(new AnalystListener());
  out->analyst_ = std::move(analyst);
  out->admission_ = std::move(*admission);
  // Health and reflection as on the device port (our own, bounded), counted for this port.
  grpc::EnableDefaultHealthCheckService(false);
  const auto refused_stream = [refusals](const std::string& reason) {
    refusals->refused(reason, "event=refused port=analyst reason=" + reason);
  };
  out->health_ =
      std::make_unique<HealthService>(limits.health_watches, limits.health_checks, refused_stream);
  out->reflection_ = std::make_unique<ReflectionService>(
      limits.reflection_streams,
      std::vector<std::string>{v1::Analyst::service_full_name(), HealthService::kServiceName},
      refused_stream);
  grpc::ServerBuilder builder;
  apply_limits(builder, limits);
  auto acceptor = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, *credentials);
  builder.RegisterService(out->analyst_.get());
  builder.RegisterService(out->health_.get());
  builder.RegisterService(&out->reflection_->v1());
  builder.RegisterService(&out->reflection_->v1alpha());
  out->server_ = builder.BuildAndStart();
  if (!out->server_)
    return make_error(ErrorCode::internal_error, "analyst_listen",
                      "analyst_listen: the gRPC server did not start");
  out->health_->set_serving("", true);
  out->health_->set_serving(v1::Analyst::service_full_name(), true);
  out->admission_->start(std::move(acceptor));
  return out;
}

AnalystListener::~AnalystListener() {
  if (!server_) return;
  health_->shutdown();
  reflection_->shutdown();
  admission_->stop();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

void AnalystListener::drain_health() {
  health_->drain();
}

int AnalystListener::port() const noexcept {
  return admission_->port();
}

std::size_t AnalystListener::open_connections() const {
  return admission_->open_connections();
}

}  // namespace cgp::transport::detail
