#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "cgp/common/geometry/signed_distance.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/common/wire/limits.hpp"
#include "support/errors.hpp"

using namespace cgp;
using namespace cgp::wire;

namespace {
std::span<const std::uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

v1::DeviceRequest valid_request() {
  v1::DeviceRequest request;
  request.mutable_id()->set_query_id("q-1");
  request.mutable_id()->set_round(1);
  request.set_component_id("location");
  request.set_rho(0.01);
  request.mutable_location();
  return request;
}
}  // namespace

TEST_CASE("wire: device requests round-trip for every statistic", "[wire]") {
  std::vector<DeviceRequest> requests;
  requests.push_back(*DeviceRequest::location({"q", 1}, "location", 0.5));
  requests.push_back(*DeviceRequest::distance_to_point({"q", 2}, "location", {1, 2, 3}, 0.25));
  geometry::Ring outer{{0, 0}, {10, 0}, {10, 10}, {0, 10}};
  geometry::Ring hole{{2, 2}, {4, 2}, {4, 4}};
  requests.push_back(*DeviceRequest::signed_distance_to_region(
      {"q", 3}, "home", *geometry::Polygon::create(outer, {hole}), 1e-4));
  double lo[2] = {0, 0}, hi[2] = {5, 6}, centre[3] = {1, 1, 1};
  requests.push_back(*DeviceRequest::signed_distance_to_region(
      {"q", 4}, "location", *geometry::Box::create(lo, hi), 1e-4));
  requests.push_back(*DeviceRequest::signed_distance_to_region(
      {"q", 5}, "location", *geometry::Ball::create(centre, 2), 1e-4));

  for (const auto& request : requests) {
    INFO("statistic " << statistic_kind_name(request.statistic()));
    std::string bytes = serialize(request_to_wire(request));
    auto parsed = parse_device_request(as_bytes(bytes));
    REQUIRE(parsed.has_value());
    auto back = request_from_wire(*parsed);
    REQUIRE(back.has_value());
    CHECK(back->id() == request.id());
    CHECK(back->component_id() == request.component_id());
    CHECK(back->statistic() == request.statistic());
    CHECK(back->rho() == request.rho());
    CHECK(back->point() == request.point());
    CHECK(back->required_dimension() == request.required_dimension());
    if (request.region()) {
      double probe[3] = {3, 3, 3};
      std::span<const double> p(probe, request.required_dimension());
      CHECK(geometry::signed_distance(*back->region(), p) ==
            geometry::signed_distance(*request.region(), p));
    }
    // Deterministic: the same request gives the same bytes (idempotent replies rely on it).
    CHECK(serialize(request_to_wire(*back)) == bytes);
  }
}

TEST_CASE("wire: device configuration round-trips and validates", "[wire]") {
  auto cgp_config = *DeviceConfig::cgp(2.5, true);
  auto back =
      *config_from_wire(*parse_device_config(as_bytes(serialize(config_to_wire(cgp_config)))));
  CHECK(back.filter() == FilterKind::cgp);
  CHECK(back.budget() == 2.5);
  CHECK(back.rho_capacity() == 2.5);
  CHECK(back.sticky_halt());
  auto gp_config = *DeviceConfig::approximate_gp(1.0, 1e-6, 10);
  auto gp_back = *config_from_wire(config_to_wire(gp_config));
  CHECK(gp_back.filter() == FilterKind::approximate_gp);
  CHECK(gp_back.delta() == 1e-6);
  CHECK(gp_back.lambda() == 10);
  CHECK(gp_back.rho_capacity() == gp_config.rho_capacity());
  CHECK(gp_back.rho_capacity() > 0);

  v1::DeviceConfig unset;
  CGP_REQUIRE_ERROR(config_from_wire(unset), ErrorCode::invalid_argument, "filter");
  v1::DeviceConfig negative;
  negative.set_filter(v1::CGP);
  negative.set_budget(-1);
  CGP_REQUIRE_ERROR(config_from_wire(negative), ErrorCode::not_positive, "budget");
  v1::DeviceConfig no_delta;
  no_delta.set_filter(v1::APPROXIMATE_GP);
  no_delta.set_budget(1);
  no_delta.set_lambda(1);
  CGP_REQUIRE_ERROR(config_from_wire(no_delta), ErrorCode::out_of_range, "delta");
}

TEST_CASE("wire: oversized and malformed bytes are rejected before use", "[wire]") {
  std::string huge(kMaxMessageBytes + 1, '\0');
  CGP_REQUIRE_ERROR(parse_device_request(as_bytes(huge)), ErrorCode::too_large, "DeviceRequest");
  CGP_REQUIRE_ERROR(parse_device_to_coordinator(as_bytes(huge)), ErrorCode::too_large,
                    "DeviceToCoordinator");
  std::string garbage = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01";
  CGP_REQUIRE_ERROR(parse_device_request(as_bytes(garbage)), ErrorCode::malformed_message,
                    "DeviceRequest");
  CGP_REQUIRE_ERROR(parse_device_reply(as_bytes(garbage)), ErrorCode::malformed_message,
                    "DeviceReply");
  CGP_REQUIRE_ERROR(parse_coordinator_to_device(as_bytes(garbage)), ErrorCode::malformed_message,
                    "CoordinatorToDevice");
  std::string truncated = serialize(valid_request());
  truncated.resize(truncated.size() - 3);
  CGP_REQUIRE_ERROR(parse_device_request(as_bytes(truncated)), ErrorCode::malformed_message,
                    "DeviceRequest");
}

TEST_CASE("wire: every invalid request field gets its named error", "[wire]") {
  REQUIRE(request_from_wire(valid_request()).has_value());
  SECTION("missing id") {
    auto r = valid_request();
    r.clear_id();
    CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::missing_field, "id");
  }
  SECTION("empty query id") {
    auto r = valid_request();
    r.mutable_id()->set_query_id("");
    CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::missing_field, "id.query_id");
  }
  SECTION("query id too long") {
    auto r = valid_request();
    r.mutable_id()->set_query_id(std::string(kMaxIdBytes + 1, 'q'));
    CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::too_large, "id.query_id");
  }
  SECTION("round 0") {
    auto r = valid_request();
    r.mutable_id()->set_round(0);
    CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::out_of_range, "id.round");
  }
  SECTION("no component") {
    auto r = valid_request();
    r.clear_component_id();
    CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::missing_field, "component_id");
  }
  SECTION("no statistic") {
    auto r = valid_request();
    r.clear_location();
    CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::missing_field, "statistic");
  }
  SECTION("rho zero, negative, NaN, infinite") {
    for (double rho : {0.0, -1.0}) {
      auto r = valid_request();
      r.set_rho(rho);
      CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::not_positive, "rho");
    }
    for (double rho : {std::nan(""), HUGE_VAL, -HUGE_VAL}) {
      auto r = valid_request();
      r.set_rho(rho);
      CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::not_finite, "rho");
    }
  }
  SECTION("distance_to_point: empty, NaN, too many dimensions") {
    auto r = valid_request();
    r.mutable_distance_to_point();
    CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::missing_field, "point");
    r.mutable_distance_to_point()->add_point(1);
    r.mutable_distance_to_point()->add_point(NAN);
    CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::not_finite, "point[1]");
    r.mutable_distance_to_point()->clear_point();
    for (std::size_t k = 0; k <= wire::kMaxDimension; ++k)
      r.mutable_distance_to_point()->add_point(0);
    CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::too_large, "point");
  }
  SECTION("region: missing, unset, odd coordinates, too many vertices, bow tie") {
    auto r = valid_request();
    r.mutable_signed_distance_to_region();
    CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::missing_field, "region");
    r.mutable_signed_distance_to_region()->mutable_region();
    CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::missing_field, "region");
    auto* polygon = r.mutable_signed_distance_to_region()->mutable_region()->mutable_polygon();
    CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::missing_field, "polygon.outer");
    for (double v : {0.0, 0.0, 1.0, 0.0, 1.0}) polygon->mutable_outer()->add_xy(v);
    CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::dimension_mismatch, "polygon.outer");
    polygon->mutable_outer()->clear_xy();
    for (double v : {0.0, 0.0, 10.0, 10.0, 10.0, 0.0, 0.0, 10.0})
      polygon->mutable_outer()->add_xy(v);
    CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::self_intersecting_polygon, "polygon.outer");
    polygon->mutable_outer()->clear_xy();
    for (std::size_t k = 0; k < 2 * (wire::kMaxPolygonVertices + 1); ++k)
      polygon->mutable_outer()->add_xy(0);
    CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::too_large, "polygon");
  }
  SECTION("region: bad box and ball") {
    auto r = valid_request();
    auto* box = r.mutable_signed_distance_to_region()->mutable_region()->mutable_box();
    box->add_lo(0);
    box->add_hi(0);
    CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::degenerate_polygon, "box.hi[0]");
    auto* ball = r.mutable_signed_distance_to_region()->mutable_region()->mutable_ball();
    ball->add_center(0);
    ball->set_radius(-2);
    CGP_REQUIRE_ERROR(request_from_wire(r), ErrorCode::not_positive, "ball.radius");
  }
}

TEST_CASE("wire: error codes map one to one onto cgp.v1.ErrorCode, by number and name", "[wire]") {
  for (int value = 0; value <= static_cast<int>(kLastErrorCode); ++value) {
    auto code = static_cast<ErrorCode>(value);
    v1::ErrorCode wire_code = error_code_to_wire(code);
    CHECK(static_cast<int>(wire_code) == value);
    CHECK(error_code_from_wire(wire_code) == code);
    std::string wire_name = v1::ErrorCode_Name(wire_code);
    std::transform(wire_name.begin(), wire_name.end(), wire_name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    CHECK(wire_name == error_code_name(code));
  }
  CHECK(error_code_from_wire(static_cast<v1::ErrorCode>(99)) == ErrorCode::invalid_argument);
}

TEST_CASE("wire: connection messages carry hello, request, reply", "[wire]") {
  v1::DeviceToCoordinator hello;
  hello.mutable_hello()->set_device_id("device-7");
  hello.mutable_hello()->set_protocol_version(kProtocolVersion);
  auto parsed = *parse_device_to_coordinator(as_bytes(serialize(hello)));
  CHECK(parsed.hello().device_id() == "device-7");
  v1::CoordinatorToDevice push;
  *push.mutable_request() = valid_request();
  auto pushed = *parse_coordinator_to_device(as_bytes(serialize(push)));
  CHECK(request_from_wire(pushed.request()).has_value());
  v1::DeviceToCoordinator reply;
  reply.mutable_reply()->set_status(v1::REFUSED_BUDGET);
  reply.mutable_reply()->set_remaining_budget(0.5);
  auto replied = *parse_device_to_coordinator(as_bytes(serialize(reply)));
  CHECK(replied.reply().status() == v1::REFUSED_BUDGET);
  CHECK(replied.reply().remaining_budget() == 0.5);
}

TEST_CASE("wire: a device reply survives the codec both ways", "[wire]") {
  cgp::DeviceReply reply;
  reply.id = {"q-1", 3};
  reply.status = cgp::ReplyStatus::rejected_invalid;
  reply.error = cgp::Error{cgp::ErrorCode::out_of_range, "rho", std::string(1000, 'x')};
  reply.remaining_budget = 0.75;
  const auto back = cgp::wire::reply_from_wire(cgp::wire::reply_to_wire(reply));
  CHECK(back.id.query_id == "q-1");
  CHECK(back.id.round == 3);
  CHECK(back.status == cgp::ReplyStatus::rejected_invalid);
  CHECK(back.error.code == cgp::ErrorCode::out_of_range);
  CHECK(back.error.message.size() == cgp::wire::kMaxReplyErrorMessage);  // cut: a size bound
  CHECK(back.remaining_budget == 0.75);
  reply.status = cgp::ReplyStatus::answered;
  reply.values = {1.5, -2.5};
  reply.charged_rho = 0.125;
  const auto answered = cgp::wire::reply_from_wire(cgp::wire::reply_to_wire(reply));
  CHECK(answered.status == cgp::ReplyStatus::answered);
  CHECK(answered.values == reply.values);
  CHECK(answered.charged_rho == 0.125);
  // An unknown status from a peer reads as rejected.
  auto wire = cgp::wire::reply_to_wire(reply);
  wire.set_status(static_cast<cgp::v1::ReplyStatus>(99));
  CHECK(cgp::wire::reply_from_wire(wire).status == cgp::ReplyStatus::rejected_invalid);
}
