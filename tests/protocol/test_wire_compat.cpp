// The wire did not move when the protocol was split into one service per file
// (protocol/proto/cgp/v1/device_gateway.proto, analyst.proto; before, one service.proto in the
// device link): same package, same names, same field numbers, so the same bytes. The fixtures
// below are what the messages serialized to before the split.
#include <catch2/catch.hpp>

#include <string>

#include "cgp/protocol/service_descriptors.hpp"
#include "cgp/protocol/status_codec.hpp"
#include "cgp/v1/analyst.grpc.pb.h"
#include "cgp/v1/device_gateway.grpc.pb.h"

using namespace cgp;

namespace {

// Messages with a field of every kind the analyst's wire has set, as an analyst and a
// coordinator built before the split sent them.
v1::RangeCountQuery range_query() {
  v1::RangeCountQuery q;
  auto* o = q.mutable_options();
  o->set_method("PM1");
  o->set_rounds(8);
  o->set_split("doubling");
  o->set_beta(0.05);
  o->set_no_shift(true);
  o->set_query_id("q-fixture");
  o->set_rho(0.125);
  o->add_users(3);
  o->add_users(70000);
  o->set_min_coverage(0.75);
  o->set_adaptive(true);
  o->set_max_missing_share(0.2);
  auto* box = q.mutable_range()->mutable_box();
  box->add_lo(1.5);
  box->add_lo(-2.0);
  box->add_hi(10.0);
  box->add_hi(20.25);
  q.mutable_accuracy()->set_relative(0.1);
  q.mutable_accuracy()->set_max_rounds(12);
  return q;
}

v1::QueryResult query_result() {
  v1::QueryResult r;
  r.set_query_id("q-fixture");
  r.set_kind("range");
  r.set_estimate(412.5);
  r.add_neighbours("device-7");
  r.add_neighbour_users(7);
  r.set_below(true);
  r.set_rounds_used(3);
  r.add_asked_per_round(100);
  r.add_eliminated_per_round(40);
  auto* charge = r.add_charges();
  charge->set_user(7);
  charge->set_rho(0.03125);
  r.set_users(100);
  r.set_users_from(0);
  r.set_users_next(65536);
  r.add_refused(1);
  r.add_rejected(2);
  r.add_unanswered(3);
  r.add_not_reached(4);
  r.set_seconds(1.25);
  r.mutable_coverage()->set_users(100);
  r.mutable_coverage()->set_answered(97);
  r.mutable_coverage()->set_valid(true);
  r.set_lower(400);
  r.set_upper(425);
  r.set_certified(false);
  r.add_top_regions(2);
  auto* count = r.add_region_counts();
  count->set_region(2);
  count->set_estimate(55);
  r.mutable_missing()->set_share(0.03);
  r.mutable_missing()->set_valid(true);
  return r;
}

v1::WatchReport watch_report() {
  v1::WatchReport w;
  w.set_watch_id("fence");
  w.mutable_spec()->set_watch_id("fence");
  auto* device = w.add_devices();
  device->set_device_id("device-1");
  device->set_user(1);
  device->set_state(v1::DEVICE_WATCH_REJECTED);
  device->set_error(v1::OUT_OF_RANGE);
  device->set_error_message("epsilon: too small");
  device->set_alert_tick(9);
  device->set_alert_received_unix_seconds(1.7e9);
  w.set_pending(1);
  w.set_armed(2);
  w.set_refused(3);
  w.set_rejected(4);
  w.set_alerts(5);
  return w;
}

v1::CoordinatorStatus coordinator_status() {
  v1::CoordinatorStatus s;
  s.set_enrolled(50);
  s.set_connected(49);
  s.set_dimension(2);
  s.set_device_budget(1.5);
  s.set_queries(6);
  s.set_rounds(24);
  s.set_requests(1200);
  s.set_replies(1190);
  s.set_unanswered(10);
  s.set_late_replies(2);
  s.set_refused_connections(7);
  return s;
}

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string bytes_of(const std::string& hex_text) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex_text.size(); i += 2)
    out += static_cast<char>(std::stoi(hex_text.substr(i, 2), nullptr, 16));
  return out;
}

// Serialized before the split (at 4f0e9b5, from device-link/proto/cgp/v1/service.proto).
const std::string kRangeQuery =
    "0a4a0a03504d3110081a08646f75626c696e67219a9999999999a93f28013209712d666978747572"
    "6539000000000000c03f420403f0a20449000000000000e83f5001599a9999999999c93f12260a24"
    "0a10000000000000f83f00000000000000c01210000000000000244000000000004034401a0b099a"
    "9999999999b93f180c";
const std::string kQueryResult =
    "0a09712d66697874757265120572616e6765190000000000c8794022086465766963652d372a0107"
    "300138034201644a01285a01016201026a010371000000000000f43f7a0608641061380181010000"
    "00000000794089010000000000907a409001009a010102a2010b0802110000000000804b40aa0101"
    "04b2010b21b81e85eb51b89e3f3001ba010b080711000000000000a03fc00164d001808004";
const std::string kWatchReport =
    "0a0566656e636512070a0566656e63651a2f0a086465766963652d311001180320032a1265707369"
    "6c6f6e3a20746f6f20736d616c6c30093900000040fc54d94120012802300338044005";
const std::string kCoordinatorStatus =
    "08321031180221000000000000f83f2806301838b00940a609480a50025807";

template <class Message>
void check_both_ways(const Message& made, const std::string& fixture) {
  CHECK(hex(made.SerializeAsString()) == fixture);  // new writers, old readers
  Message parsed;
  REQUIRE(parsed.ParseFromString(bytes_of(fixture)));  // old writers, new readers
  CHECK(parsed.SerializeAsString() == made.SerializeAsString());
}

}  // namespace

TEST_CASE("protocol: analyst messages are the bytes they were before the split",
          "[protocol][wire]") {
  check_both_ways(range_query(), kRangeQuery);
  check_both_ways(query_result(), kQueryResult);
  check_both_ways(watch_report(), kWatchReport);
  check_both_ways(coordinator_status(), kCoordinatorStatus);
}

TEST_CASE("protocol: services and methods keep their full names", "[protocol][wire]") {
  CHECK(std::string(v1::DeviceGateway::service_full_name()) == "cgp.v1.DeviceGateway");
  CHECK(std::string(v1::Analyst::service_full_name()) == "cgp.v1.Analyst");
  const auto* analyst = v1::RangeCountQuery::descriptor()->file()->FindServiceByName("Analyst");
  REQUIRE(analyst != nullptr);
  std::string methods;
  for (int i = 0; i < analyst->method_count(); ++i) methods += analyst->method(i)->name() + " ";
  CHECK(methods == "RangeCount Kde Knn Threshold TopRegions GetResult StartWatch GetWatch Status ");
  const auto& gateway = protocol::device_gateway_descriptor();
  CHECK(gateway.file()->name() == "cgp/v1/device_gateway.proto");
  CHECK(gateway.full_name() == "cgp.v1.DeviceGateway");
  const auto* connect = gateway.FindMethodByName("Connect");
  REQUIRE(connect != nullptr);
  CHECK(connect->client_streaming());
  CHECK(connect->server_streaming());
  CHECK(connect->input_type()->full_name() == "cgp.v1.DeviceToCoordinator");
  CHECK(connect->output_type()->full_name() == "cgp.v1.CoordinatorToDevice");
}

TEST_CASE("protocol: the status codec carries the cgp code and names the parameter",
          "[protocol][status]") {
  grpc::ServerContext context;
  const auto status =
      protocol::to_grpc_status(&context, Error{ErrorCode::out_of_range, "epsilon", "too small"});
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(status.error_message() == "epsilon: too small");
  const std::string code = std::to_string(static_cast<int>(ErrorCode::out_of_range));
  const std::multimap<grpc::string_ref, grpc::string_ref> trailing = {
      {protocol::kErrorCodeKey, code}};
  const Error back = protocol::from_grpc_status(status, trailing, "coordinator");
  CHECK(back.code == ErrorCode::out_of_range);
  CHECK(back.parameter == "epsilon");
  // gRPC's own statuses (no cgp code) say what kind of failure it was, naming the peer.
  const Error unreachable = protocol::from_grpc_status(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "connect failed"), {}, "coordinator");
  CHECK(unreachable.code == ErrorCode::unavailable);
  CHECK(unreachable.parameter == "coordinator");
}
