#include "cgp/transport/coordinator_service.hpp"

#include <grpcpp/grpcpp.h>

#include <limits>
#include <mutex>
#include <optional>

#include "analyst_call_guard.hpp"
#include "analyst_listener.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/wire/limits.hpp"
#include "cgp/coordinator/adaptive_budget.hpp"
#include "cgp/coordinator/budget_mirror.hpp"
#include "cgp/protocol/log_format.hpp"
#include "cgp/protocol/status_codec.hpp"
#include "cgp/v1/analyst.grpc.pb.h"
#include "console_server.hpp"
#include "coordinator_state.hpp"
#include "header_time_service.hpp"
#include "metrics_endpoint.hpp"
#include "query_desk.hpp"
#include "refusal_log.hpp"

namespace cgp::transport {

using protocol::log_value;
using protocol::require_id;

namespace {

// Every error crosses the wire through status_codec.hpp: a kind (gRPC code), the cgp code in
// trailing metadata, "parameter: message".
grpc::Status to_status(grpc::ServerContextBase* context, const Error& error) {
  return protocol::to_grpc_status(context, error);
}

}  // namespace

// The service: the desk, and the Analyst API's own port when it has one (stopped before the
// desk's gateway and metrics, which ~QueryDesk stops first of all).
struct CoordinatorService::Impl : QueryDesk {
  std::unique_ptr<detail::AnalystListener> analyst_listener;  // with analyst_address
  std::unique_ptr<detail::ConsoleServer> console;             // with console_address
  // enrol and revoke one at a time: the roster and the gateway change together.
  std::mutex enrolment_mutex;
};

namespace {

grpc::Status starting(grpc::ServerContextBase* context) {
  return to_status(context, Error{ErrorCode::unavailable, "coordinator",
                                  "coordinator: starting; retry in a moment"});
}

// The Analyst gRPC service, forwarding to the coordinator (which outlives the server). Calls are
// taken at their headers (header_time_service.hpp): one without the analyst credential ends
// there, holding nothing; an admitted one is counted (ConnectionLimits::analyst_calls) until it
// is answered. Queries run on one lane (they take the query lock one at a time anyway), reads
// (status, results, watches) on another, so that a read never waits behind a query.
class AnalystEndpoint final : public detail::HeaderTimeService {
 public:
  // `port` names the port in refusal lines ("analyst": its own; empty: the device port).
  AnalystEndpoint(QueryDesk& impl, StreamCaps caps, std::function<void(const std::string&)> log,
                  const std::string& port)
      : impl_(impl),
        calls_(caps, "analyst-call"),
        refusals_(std::move(log)),
        refusal_line_(port.empty() ? "event=refused reason="
                                   : "event=refused port=" + port + " reason=") {
    add("/cgp.v1.Analyst/RangeCount", queries_, &QueryDesk::range_count);
    add("/cgp.v1.Analyst/Kde", queries_, &QueryDesk::kde);
    add("/cgp.v1.Analyst/Knn", queries_, &QueryDesk::knn);
    add("/cgp.v1.Analyst/GetResult", reads_, &QueryDesk::get_result, kNotFound);
    add("/cgp.v1.Analyst/Status", reads_, &QueryDesk::status);
    add("/cgp.v1.Analyst/StartWatch", queries_, &QueryDesk::start_watch);
    add("/cgp.v1.Analyst/GetWatch", reads_, &QueryDesk::get_watch, kNotFound);
    add("/cgp.v1.Analyst/Threshold", queries_, &QueryDesk::threshold);
    add("/cgp.v1.Analyst/TopRegions", queries_, &QueryDesk::top_regions);
  }

 private:
  // An unknown id (GetResult, GetWatch) is NOT_FOUND on the wire; every other error maps by its
  // code (status_codec.hpp).
  static constexpr bool kNotFound = true;

  // The one place where the desk's errors become gRPC statuses.
  template <class Request, class Response>
  void add(const char* path, detail::CallLane& lane,
           cgp::Status (QueryDesk::*method)(const Request*, Response*),
           bool errors_are_not_found = false) {
    using Call = detail::UnaryCall<Request, Response>;
    auto handler = std::make_shared<typename Call::Handler>(
        [&core = impl_, method, errors_are_not_found](grpc::CallbackServerContext& c,
                                                      const Request& q, Response& r) {
          // No implicit `this` in the inner lambda: GCC 12's -fsanitize=vptr checks the inner
          // closure's own address as the endpoint there (a false "invalid vptr").
          return detail::guarded(&c, [&core, method, errors_are_not_found, &c, &q, &r] {
            if (!core.ready) return starting(&c);
            const cgp::Status done = (core.*method)(&q, &r);
            if (done) return grpc::Status::OK;
            return errors_are_not_found
                       ? protocol::to_grpc_status(&c, done.error(), grpc::StatusCode::NOT_FOUND)
                       : to_status(&c, done.error());
          });
        });
    handlers_.push_back(handler);
    add_method<Request, Response>(
        path,
        [this, &lane, h = handler.get()](
            grpc::CallbackServerContext* context) -> grpc::ServerBidiReactor<Request, Response>* {
          if (!detail::analyst_authorised(*context, impl_.options.analyst_credential_sha256))
            return new detail::RefusedCall<Request, Response>(
                detail::analyst_unauthenticated(context));
          return Call::start(context, calls_, *h, &lane, "analyst calls",
                             [this](const std::string& reason) {
                               refusals_.refused(reason, refusal_line_ + reason);
                             });
        });
  }

  QueryDesk& impl_;
  detail::StreamRegistry calls_;
  detail::RefusalLog refusals_;
  const std::string refusal_line_;
  std::vector<std::shared_ptr<void>> handlers_;  // each method's, for as long as the server
  detail::CallLane queries_{2}, reads_{4};       // joined first: their calls are answered
};

}  // namespace

namespace {

// The previous stop's reconnect plan, kept in the state file's counters, so that a restarted
// coordinator can tell a device that did not wait the time it was given (gateway.hpp).
constexpr const char* kPlanStoppedAt = "reconnect_stopped_at_ms";
constexpr const char* kPlanWindow = "reconnect_window_ms";
constexpr const char* kPlanKey[2] = {"reconnect_key_0", "reconnect_key_1"};

cgp::Status save_reconnect_plan(detail::CoordinatorState& state, const ReconnectPlan& plan) {
  std::vector<std::pair<std::string, std::uint64_t>> values{{kPlanStoppedAt, plan.stopped_at_ms},
                                                            {kPlanWindow, plan.window_ms}};
  for (int half = 0; half < 2; ++half) {
    std::uint64_t part = 0;
    for (int b = 0; b < 8; ++b)
      part = (part << 8) | plan.key[static_cast<std::size_t>(half * 8 + b)];
    values.emplace_back(kPlanKey[half], part);
  }
  return state.set_counters(values);
}

Expected<std::optional<ReconnectPlan>> load_reconnect_plan(const detail::CoordinatorState& state) {
  ReconnectPlan plan;
  CGP_ASSIGN_OR_RETURN(plan.stopped_at_ms, state.counter(kPlanStoppedAt));
  CGP_ASSIGN_OR_RETURN(plan.window_ms, state.counter(kPlanWindow));
  if (plan.window_ms == 0) return std::optional<ReconnectPlan>{};
  for (int half = 0; half < 2; ++half) {
    CGP_ASSIGN_OR_RETURN(std::uint64_t part, state.counter(kPlanKey[half]));
    for (int b = 7; b >= 0; --b, part >>= 8)
      plan.key[static_cast<std::size_t>(half * 8 + b)] = static_cast<std::uint8_t>(part & 0xff);
  }
  return std::optional<ReconnectPlan>{plan};
}

}  // namespace

CoordinatorService::CoordinatorService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CoordinatorService::~CoordinatorService() {
  impl_->console.reset();           // no console request starts or runs from here on
  impl_->metrics.reset();           // no scrape reads the gateway while it goes
  impl_->analyst_listener.reset();  // no analyst call starts or runs from here on
  // The totals as this run leaves them (what the gateway counts while it shuts down is lost).
  const GatewayCounters last = impl_->counters();
  const ReconnectPlan plan = impl_->gateway->stop();  // each device told when to come back
  impl_->gateway.reset();  // no analyst call runs after this: the mirror is final
  std::lock_guard lock(impl_->query_mutex);
  impl_->release_watch_holds();
  impl_->persist_mirror();
  if (impl_->state) {
    if (auto saved = impl_->save_counters(last); !saved)
      impl_->log("event=state-error error=" + log_value(saved.error().message));
    if (auto saved = save_reconnect_plan(*impl_->state, plan); !saved)
      impl_->log("event=state-error error=" + log_value(saved.error().message));
  }
}

Expected<std::unique_ptr<CoordinatorService>> CoordinatorService::start(
    const CoordinatorOptions& options) {
  if (options.device_ids.empty())
    return make_error(ErrorCode::invalid_argument, "devices", "no device is enrolled");
  if (options.device_ids.size() > std::numeric_limits<coordinator::UserId>::max())
    return make_error(ErrorCode::too_large, "devices", "too many devices");
  CGP_RETURN_IF_ERROR(require_finite_positive("device_budget", options.device_budget));
  if (options.dimension == 0 || options.dimension > wire::kMaxDimension)
    return make_error(ErrorCode::out_of_range, "dimension", "dimension must be 1..4096");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  for (const auto& id : options.device_ids) {
    auto enrolled = impl->roster.enrol(id);
    if (!enrolled) return enrolled.error();
    if (!enrolled->new_user)
      return make_error(ErrorCode::already_exists, "devices",
                        "device id '" + id + "' is enrolled twice");
  }
  for (const auto& id : options.revoked_device_ids)
    if (!impl->roster.revoke(id) && !impl->roster.find(id))
      return make_error(ErrorCode::invalid_argument, "revoked_device_ids",
                        "revoked device id '" + id + "' is not among device_ids");
  auto config = DeviceConfig::cgp(options.device_budget);
  if (!config) return config.error();
  impl->rho_capacity = config->rho_capacity();
  impl->mirror = std::make_unique<coordinator::BudgetMirror>(options.device_ids.size(),
                                                             config->rho_capacity());
  if (options.drain < std::chrono::milliseconds(0) || options.drain > CoordinatorOptions::kMaxDrain)
    return make_error(
        ErrorCode::out_of_range, "drain",
        "drain: " + std::to_string(options.drain.count()) + " ms is not within 0 .. " +
            std::to_string(CoordinatorOptions::kMaxDrain.count()) + " ms (10 minutes)");
  if (options.retention.max_results == 0 || options.retention.max_age.count() <= 0)
    return make_error(ErrorCode::not_positive, "retention",
                      "retention: max_results and max_age must be > 0");
  if (!options.state_path.empty()) {
    auto state = detail::CoordinatorState::open(options.state_path, options.init_state);
    if (!state) return state.error();
    impl->state = std::move(*state);
  }
  auto allocation =
      coordinator::AdaptiveBudget::open_ended(config->rho_capacity(), options.horizon);
  if (!allocation) return allocation.error();
  impl->allocation = *allocation;
  if (impl->state) CGP_RETURN_IF_ERROR(impl->restore());
  GatewayOptions gateway_options = options.gateway;
  if (impl->state) {
    auto kept = impl->state->watches();
    if (!kept) return kept.error();
    gateway_options.watches = std::move(*kept);
    if (!gateway_options.previous_stop) {
      CGP_ASSIGN_OR_RETURN(gateway_options.previous_stop, load_reconnect_plan(*impl->state));
    }
  }
  gateway_options.watch_changed = [core = impl.get()](const std::string& watch,
                                                      const std::string& device,
                                                      const std::string& bytes) {
    if (core->state) {
      auto saved = device.empty() ? core->state->save_watch(watch, bytes)
                                  : core->state->save_watch_device(watch, device, bytes);
      if (!saved) {
        // A refusal not on disk could be sent again after a restart and armed then: its hold
        // stays taken.
        core->log("event=state-error error=" + log_value(saved.error().message));
        return;
      }
    }
    if (!device.empty()) core->watch_answered(watch, device, bytes);
  };
  const bool own_analyst_port = !options.analyst_address.empty();
  if (!own_analyst_port)
    gateway_options.extra_services.push_back(
        {v1::Analyst::service_full_name(), [core = impl.get()]() -> std::unique_ptr<grpc::Service> {
           return std::make_unique<AnalystEndpoint>(
               *core, core->options.gateway.limits.analyst_calls, core->options.gateway.log, "");
         }});
  auto gateway = DeviceGateway::start(gateway_options);
  if (!gateway) return gateway.error();
  impl->gateway = std::move(*gateway);
  if (own_analyst_port) {
    auto listener = detail::AnalystListener::start(
        options.analyst_address, options.analyst_limits, options.gateway.tls_certificate_chain,
        options.gateway.tls_private_key,
        std::make_unique<AnalystEndpoint>(*impl, options.analyst_limits.analyst_calls,
                                          options.gateway.log, "analyst"),
        options.gateway.log);
    if (!listener) return listener.error();
    impl->analyst_listener = std::move(*listener);
  } else {
    impl->gateway->set_serving("cgp.v1.Analyst", true);
  }
  if (!options.metrics_address.empty()) {
    auto* core = impl.get();
    auto metrics = detail::MetricsEndpoint::start(
        options.metrics_address, {[core] { return core->gateway->counters(); },
                                  [core] { return core->gateway->connected(); },
                                  [core] { return core->enrolled_not_revoked(); }});
    if (!metrics) return metrics.error();
    impl->metrics = std::move(*metrics);
  }
  if (!options.console_address.empty()) {
    detail::ConsoleSettings console;
    console.address = options.console_address;
    console.assets_dir = options.console_assets_dir;
    console.tiles_url = options.console_tiles_url;
    console.frame = options.gateway.frame;
    console.tls_certificate_chain = options.gateway.tls_certificate_chain;
    console.tls_private_key = options.gateway.tls_private_key;
    console.credential_sha256 = options.analyst_credential_sha256;
    console.log = options.gateway.log;
    auto server = detail::ConsoleServer::start(*impl, std::move(console));
    if (!server) return server.error();
    impl->console = std::move(*server);
  }
  impl->fleet =
      std::make_unique<NetworkFleet>(*impl->gateway, options.device_ids, options.dimension,
                                     config->rho_capacity(), options.round_deadline);
  impl->fleet->set_check_in(options.check_in);
  if (impl->state)
    impl->fleet->set_before_round([core = impl.get()](const coordinator::RoundRequest& round) {
      return core->record_intent(round);
    });
  impl->ready = true;
  return std::unique_ptr<CoordinatorService>(new CoordinatorService(std::move(impl)));
}

int CoordinatorService::metrics_port() const noexcept {
  return impl_->metrics ? impl_->metrics->port() : 0;
}

int CoordinatorService::console_port() const noexcept {
  return impl_->console ? impl_->console->port() : 0;
}

int CoordinatorService::analyst_port() const noexcept {
  return impl_->analyst_listener ? impl_->analyst_listener->port() : impl_->gateway->port();
}

int CoordinatorService::port() const noexcept {
  return impl_->gateway->port();
}

DeviceGateway& CoordinatorService::gateway() noexcept {
  return *impl_->gateway;
}

std::chrono::steady_clock::time_point CoordinatorService::start_draining() {
  impl_->gateway->drain_health();
  if (impl_->analyst_listener) impl_->analyst_listener->drain_health();
  return std::chrono::steady_clock::now() + impl_->options.drain;
}

Expected<bool> CoordinatorService::revoke(const std::string& device_id) {
  std::lock_guard lock(impl_->enrolment_mutex);
  if (!impl_->roster.find(device_id))
    return make_error(ErrorCode::invalid_argument, "device_id",
                      "device id '" + device_id + "' is not enrolled");
  // The stream ends first, at once, even while a query runs.
  const bool first = impl_->gateway->revoke(device_id);
  impl_->roster.revoke(device_id);
  return first;
}

Expected<EnrolOutcome> CoordinatorService::enrol(const std::string& device_id,
                                                 const CredentialSha256& credential_sha256) {
  CGP_RETURN_IF_ERROR(require_id("device_id", device_id));
  std::lock_guard lock(impl_->enrolment_mutex);
  // The user first (its index is fixed from here on), then the credential that lets it in: a
  // device that can connect is always a user the next query can ask.
  CGP_ASSIGN_OR_RETURN(const auto user, impl_->roster.enrol(device_id));
  const auto admitted = impl_->gateway->enrol(device_id, credential_sha256);
  EnrolOutcome out;
  out.user = user.user;
  out.new_user = user.new_user;
  out.readmitted = user.readmitted;
  out.credential_changed = admitted == DeviceGateway::Enrolled::credential_changed;
  return out;
}

}  // namespace cgp::transport
