#include "cgp/analyst/analyst_client.hpp"
#include "cgp/protocol/status_codec.hpp"

#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstdlib>

#include "cgp/common/validate.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/v1/analyst.grpc.pb.h"

namespace cgp::analyst {

struct AnalystClient::Impl {
  AnalystConnection connection;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Analyst::Stub> stub;

  void prepare(grpc::ClientContext& context) const {
    context.set_deadline(std::chrono::system_clock::now() + connection.timeout);
    if (!connection.credential.empty())
      context.AddMetadata("cgp-analyst-credential", connection.credential);
  }
};

namespace {

Error error_of(const grpc::ClientContext& context, const grpc::Status& status) {
  return protocol::from_grpc_status(status, context.GetServerTrailingMetadata(), "coordinator");
}

// Checked here, before anything is sent (and again by the service).
Status options_to_wire(const coordinator::QueryOptions& in, const RemoteCharges& charges,
                       const AnalystConnection& connection, v1::QueryOptions& out) {
  if (charges.cap) CGP_RETURN_IF_ERROR(require_finite_positive("charge", charges.cap->value()));
  if (connection.min_coverage) out.set_min_coverage(*connection.min_coverage);
  if (connection.max_missing_share) out.set_max_missing_share(*connection.max_missing_share);
  out.set_method(std::string(coordinator::method_name(in.method)));
  out.set_rounds(static_cast<std::uint32_t>(in.rounds));
  out.set_split(std::string(privacy::split_schedule_name(in.split)));
  out.set_beta(in.beta);
  out.set_no_shift(!in.shift);
  out.set_query_id(in.query_id);
  out.set_rho(charges.cap ? charges.cap->value() : 0.0);
  out.set_adaptive(!charges.cap);
  out.mutable_users()->Assign(charges.users.begin(), charges.users.end());
  return {};
}

// The most user indices a result may name: the client rebuilds `charged` densely (8 bytes a
// user), so a coordinator's claim beyond this is refused rather than allocated.
constexpr std::uint32_t kMaxResultUsers = std::uint32_t{1} << 26;

Expected<RemoteResult> result_from_wire(const v1::QueryResult& in) {
  RemoteResult out;
  if (in.users() > kMaxResultUsers)
    return make_error(ErrorCode::too_large, "users",
                      "the coordinator's result names " + std::to_string(in.users()) +
                          " users, more than " + std::to_string(kMaxResultUsers));
  out.report.charged.assign(in.users(), coordinator::Charge{});
  for (const auto& charge : in.charges()) {
    if (charge.user() >= in.users() || !(charge.rho() > 0) || !std::isfinite(charge.rho()))
      return make_error(ErrorCode::invalid_argument, "charges",
                        "the coordinator's result charges user " + std::to_string(charge.user()) +
                            " an invalid amount or outside its " + std::to_string(in.users()) +
                            " users");
    out.report.charged[charge.user()] = coordinator::Charge{charge.rho()};
  }
  out.query_id = in.query_id();
  out.estimate = in.estimate();
  out.neighbours.assign(in.neighbour_users().begin(), in.neighbour_users().end());
  out.neighbour_ids.assign(in.neighbours().begin(), in.neighbours().end());
  out.below = in.below();
  out.coverage = {in.coverage().users(),      in.coverage().answered(),
                  in.coverage().refused(),    in.coverage().rejected(),
                  in.coverage().unanswered(), in.coverage().min_coverage(),
                  in.coverage().valid()};
  out.missing = {in.missing().users(), in.missing().lower(),     in.missing().upper(),
                 in.missing().share(), in.missing().max_share(), in.missing().valid()};
  out.report.rounds_used = in.rounds_used();
  out.report.asked_per_round.assign(in.asked_per_round().begin(), in.asked_per_round().end());
  out.report.eliminated_per_round.assign(in.eliminated_per_round().begin(),
                                         in.eliminated_per_round().end());
  out.report.refused.assign(in.refused().begin(), in.refused().end());
  out.report.rejected.assign(in.rejected().begin(), in.rejected().end());
  out.report.unanswered.assign(in.unanswered().begin(), in.unanswered().end());
  out.report.not_reached.assign(in.not_reached().begin(), in.not_reached().end());
  out.seconds = in.seconds();
  if (in.has_certified()) {
    out.lower = in.lower();
    out.upper = in.upper();
    out.certified = in.certified();
  }
  out.top_regions.assign(in.top_regions().begin(), in.top_regions().end());
  for (const auto& c : in.region_counts())
    out.region_counts.push_back({c.region(), c.estimate(), c.lower(), c.upper()});
  return out;
}

// The accuracy part of a request; the options' rounds and split give way to it.
Status accuracy_to_wire(const RemoteAccuracy& in, v1::QueryOptions& options,
                        v1::AccuracyTarget& out) {
  if (in.max_rounds < 1 || in.max_rounds > 64)
    return make_error(ErrorCode::out_of_range, "max_rounds",
                      "max_rounds must be 1..64, got " + std::to_string(in.max_rounds));
  options.set_rounds(0);
  options.clear_split();
  out.set_relative(in.target.relative);
  out.set_absolute(in.target.absolute);
  out.set_max_rounds(static_cast<std::uint32_t>(in.max_rounds));
  out.set_growth(in.growth);
  out.set_first(in.first);
  return {};
}

// The rest of a paged result (its users_next), asked page by page with GetResult and appended
// to `result`. Each page must start where asked and end further on: a coordinator cannot make
// the client loop.
template <class ClientState>
Status fetch_remaining_pages(const ClientState& impl, v1::QueryResult& result) {
  std::uint32_t next = result.users_next();
  while (next != 0) {
    if (next >= result.users())
      return make_error(
          ErrorCode::invalid_argument, "users_next",
          "the coordinator's result pages past its " + std::to_string(result.users()) + " users");
    grpc::ClientContext context;
    impl.prepare(context);
    v1::ResultRequest request;
    request.set_query_id(result.query_id());
    request.set_users_from(next);
    v1::QueryResult page;
    const grpc::Status status = impl.stub->GetResult(&context, request, &page);
    if (!status.ok()) return error_of(context, status);
    if (page.users_from() != next || (page.users_next() != 0 && page.users_next() <= next))
      return make_error(
          ErrorCode::invalid_argument, "users_next",
          "the coordinator's result page does not move on from user " + std::to_string(next));
    for (const auto& charge : page.charges()) *result.add_charges() = charge;
    result.mutable_refused()->MergeFrom(page.refused());
    result.mutable_rejected()->MergeFrom(page.rejected());
    result.mutable_unanswered()->MergeFrom(page.unanswered());
    result.mutable_not_reached()->MergeFrom(page.not_reached());
    next = page.users_next();
  }
  result.set_users_next(0);
  return {};
}

// The client's state type is deduced: AnalystClient::Impl is private.
template <class ClientState, class Request, class Call>
Expected<RemoteResult> call(const ClientState& impl, const Request& request, Call&& rpc) {
  grpc::ClientContext context;
  impl.prepare(context);
  v1::QueryResult response;
  const grpc::Status status = rpc(&context, request, &response);
  if (!status.ok()) return error_of(context, status);
  CGP_RETURN_IF_ERROR(fetch_remaining_pages(impl, response));
  return result_from_wire(response);
}

}  // namespace

AnalystClient::AnalystClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
AnalystClient::~AnalystClient() = default;
AnalystClient::AnalystClient(AnalystClient&&) noexcept = default;
AnalystClient& AnalystClient::operator=(AnalystClient&&) noexcept = default;

Expected<AnalystClient> AnalystClient::connect(const AnalystConnection& connection) {
  if (connection.coordinator_address.empty())
    return make_error(ErrorCode::missing_field, "coordinator", "coordinator address is empty");
  auto impl = std::make_unique<Impl>();
  impl->connection = connection;
  grpc::ChannelArguments arguments;
  // Results carry one charge per user: a million users is 8 MB.
  arguments.SetMaxReceiveMessageSize(256 << 20);
  // A coordinator that is starting (status --wait-connected) is found within a second: gRPC's
  // default reconnect backoff grows to minutes.
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto credentials = connection.tls_root_certificate.empty()
                         ? grpc::InsecureChannelCredentials()
                         : grpc::SslCredentials({connection.tls_root_certificate, "", ""});
  impl->channel = grpc::CreateCustomChannel(connection.coordinator_address, credentials, arguments);
  impl->stub = v1::Analyst::NewStub(impl->channel);
  return AnalystClient(std::move(impl));
}

Expected<RemoteResult> AnalystClient::range_count(const geometry::Region& range,
                                                  const RemoteCharges& charges,
                                                  const coordinator::QueryOptions& options) {
  v1::RangeCountQuery request;
  CGP_RETURN_IF_ERROR(
      options_to_wire(options, charges, impl_->connection, *request.mutable_options()));
  *request.mutable_range() = wire::region_to_wire(range);
  return call(*impl_, request, [&](auto* c, const auto& r, auto* out) {
    return impl_->stub->RangeCount(c, r, out);
  });
}

Expected<RemoteResult> AnalystClient::kde(std::span<const double> point, double bandwidth,
                                          const RemoteCharges& charges,
                                          const coordinator::QueryOptions& options) {
  v1::KdeQuery request;
  CGP_RETURN_IF_ERROR(
      options_to_wire(options, charges, impl_->connection, *request.mutable_options()));
  request.mutable_point()->Assign(point.begin(), point.end());
  request.set_bandwidth(bandwidth);
  return call(*impl_, request,
              [&](auto* c, const auto& r, auto* out) { return impl_->stub->Kde(c, r, out); });
}

Expected<RemoteResult> AnalystClient::range_count(const geometry::Region& range,
                                                  const RemoteCharges& charges,
                                                  const RemoteAccuracy& accuracy,
                                                  const coordinator::QueryOptions& options) {
  v1::RangeCountQuery request;
  CGP_RETURN_IF_ERROR(
      options_to_wire(options, charges, impl_->connection, *request.mutable_options()));
  CGP_RETURN_IF_ERROR(
      accuracy_to_wire(accuracy, *request.mutable_options(), *request.mutable_accuracy()));
  *request.mutable_range() = wire::region_to_wire(range);
  return call(*impl_, request, [&](auto* c, const auto& r, auto* out) {
    return impl_->stub->RangeCount(c, r, out);
  });
}

Expected<RemoteResult> AnalystClient::kde(std::span<const double> point, double bandwidth,
                                          const RemoteCharges& charges,
                                          const RemoteAccuracy& accuracy,
                                          const coordinator::QueryOptions& options) {
  v1::KdeQuery request;
  CGP_RETURN_IF_ERROR(
      options_to_wire(options, charges, impl_->connection, *request.mutable_options()));
  CGP_RETURN_IF_ERROR(
      accuracy_to_wire(accuracy, *request.mutable_options(), *request.mutable_accuracy()));
  request.mutable_point()->Assign(point.begin(), point.end());
  request.set_bandwidth(bandwidth);
  return call(*impl_, request,
              [&](auto* c, const auto& r, auto* out) { return impl_->stub->Kde(c, r, out); });
}

Expected<RemoteResult> AnalystClient::top_regions(std::span<const geometry::Region> regions,
                                                  std::size_t k, const RemoteCharges& charges,
                                                  const RemoteAccuracy& schedule,
                                                  const coordinator::QueryOptions& options) {
  v1::TopRegionsQuery request;
  coordinator::QueryOptions as_point = options;
  as_point.method = coordinator::Method::PM0;
  CGP_RETURN_IF_ERROR(
      options_to_wire(as_point, charges, impl_->connection, *request.mutable_options()));
  CGP_RETURN_IF_ERROR(
      accuracy_to_wire(schedule, *request.mutable_options(), *request.mutable_schedule()));
  for (const auto& region : regions) *request.add_regions() = wire::region_to_wire(region);
  if (k > 10000) return make_error(ErrorCode::out_of_range, "k", "k must be at most 10000");
  request.set_k(static_cast<std::uint32_t>(k));
  return call(*impl_, request, [&](auto* c, const auto& r, auto* out) {
    return impl_->stub->TopRegions(c, r, out);
  });
}

Expected<RemoteResult> AnalystClient::knn(std::span<const double> point, std::size_t k,
                                          const RemoteCharges& charges,
                                          const coordinator::QueryOptions& options) {
  v1::KnnQuery request;
  CGP_RETURN_IF_ERROR(
      options_to_wire(options, charges, impl_->connection, *request.mutable_options()));
  request.mutable_point()->Assign(point.begin(), point.end());
  if (k > std::numeric_limits<std::uint32_t>::max())
    return make_error(ErrorCode::out_of_range, "k", "k does not fit the wire");
  request.set_k(static_cast<std::uint32_t>(k));
  return call(*impl_, request,
              [&](auto* c, const auto& r, auto* out) { return impl_->stub->Knn(c, r, out); });
}

Expected<RemoteResult> AnalystClient::threshold(const std::string& device_id, double q,
                                                double population, const RemoteCharges& charges,
                                                const coordinator::QueryOptions& options) {
  if (!charges.users.empty())
    return make_error(ErrorCode::invalid_argument, "users",
                      "a threshold query is over its one device; users must be empty");
  v1::ThresholdQuery request;
  CGP_RETURN_IF_ERROR(
      options_to_wire(options, charges, impl_->connection, *request.mutable_options()));
  request.set_device_id(device_id);
  request.set_q(q);
  request.set_population(population);
  return call(*impl_, request,
              [&](auto* c, const auto& r, auto* out) { return impl_->stub->Threshold(c, r, out); });
}

Expected<RemoteResult> AnalystClient::result(const std::string& query_id) {
  v1::ResultRequest request;
  request.set_query_id(query_id);
  return call(*impl_, request,
              [&](auto* c, const auto& r, auto* out) { return impl_->stub->GetResult(c, r, out); });
}

namespace {
RemoteWatch watch_from_wire(const v1::WatchReport& in) {
  RemoteWatch out;
  out.watch_id = in.watch_id();
  if (auto spec = wire::watch_from_wire(in.spec())) out.spec = std::move(*spec);
  for (const auto& d : in.devices()) {
    RemoteDeviceWatch device;
    device.device_id = d.device_id();
    device.user = d.user();
    switch (d.state()) {
      case v1::DEVICE_WATCH_ARMED:
        device.state = RemoteDeviceWatch::State::armed;
        break;
      case v1::DEVICE_WATCH_REFUSED:
        device.state = RemoteDeviceWatch::State::refused;
        break;
      case v1::DEVICE_WATCH_REJECTED:
        device.state = RemoteDeviceWatch::State::rejected;
        break;
      default:
        device.state = RemoteDeviceWatch::State::pending;
        break;
    }
    device.error = Error{wire::error_code_from_wire(d.error()), "", d.error_message()};
    device.alert_tick = d.alert_tick();
    device.alert_received_unix_seconds = d.alert_received_unix_seconds();
    out.devices.push_back(std::move(device));
  }
  out.pending = in.pending();
  out.armed = in.armed();
  out.refused = in.refused();
  out.rejected = in.rejected();
  out.alerts = in.alerts();
  return out;
}
}  // namespace

Expected<RemoteWatch> AnalystClient::start_watch(const WatchSpec& spec,
                                                 const std::vector<coordinator::UserId>& users) {
  grpc::ClientContext context;
  impl_->prepare(context);
  v1::StartWatchRequest request;
  *request.mutable_spec() = wire::watch_to_wire(spec);
  for (auto u : users) request.add_users(static_cast<std::uint32_t>(u));
  v1::WatchReport report;
  const grpc::Status status = impl_->stub->StartWatch(&context, request, &report);
  if (!status.ok()) return error_of(context, status);
  return watch_from_wire(report);
}

Expected<RemoteWatch> AnalystClient::watch(const std::string& watch_id) {
  grpc::ClientContext context;
  impl_->prepare(context);
  v1::WatchReportRequest request;
  request.set_watch_id(watch_id);
  v1::WatchReport report;
  const grpc::Status status = impl_->stub->GetWatch(&context, request, &report);
  if (!status.ok()) return error_of(context, status);
  return watch_from_wire(report);
}

Expected<RemoteStatus> AnalystClient::status() {
  grpc::ClientContext context;
  impl_->prepare(context);
  v1::StatusRequest request;
  v1::CoordinatorStatus s;
  const grpc::Status status = impl_->stub->Status(&context, request, &s);
  if (!status.ok()) return error_of(context, status);
  RemoteStatus out;
  out.enrolled = s.enrolled();
  out.connected = s.connected();
  out.dimension = s.dimension();
  out.device_budget = s.device_budget();
  out.queries = s.queries();
  out.rounds = s.rounds();
  out.requests = s.requests();
  out.replies = s.replies();
  out.unanswered = s.unanswered();
  out.late_replies = s.late_replies();
  out.refused_connections = s.refused_connections();
  return out;
}

}  // namespace cgp::analyst
