// Location frames: a device given GPS lon/lat projects it with the coordinator's
// announced frame, answers requests stamped with that frame, and refuses by name (charging
// nothing) a request stamped with another.
#include <catch2/catch.hpp>
#include <cmath>

#include "cgp/client/device.hpp"
#include "cgp/common/geometry/frame_projection.hpp"
#include "cgp/common/geometry/location_frame.hpp"
#include "cgp/common/wire/codec.hpp"
#include "device_fixtures.hpp"

using namespace cgp;
using namespace cgp::test;
using geometry::LocationFrame;
using geometry::ProjectionKind;

namespace {

const LocationFrame kManhattan =
    LocationFrame::create(ProjectionKind::local_equidistant, -73.97, 40.75).value();
const LocationFrame kBrooklyn =
    LocationFrame::create(ProjectionKind::local_equidistant, -73.95, 40.65).value();

}  // namespace

TEST_CASE("location frame: parsed, printed and validated by name", "[common][frame]") {
  auto local = LocationFrame::parse("local:-73.97,40.75");
  REQUIRE(local.has_value());
  CHECK(*local == kManhattan);
  CHECK(LocationFrame::parse(local->to_string()).value() == *local);
  auto mercator = LocationFrame::parse("mercator:10.5");
  REQUIRE(mercator.has_value());
  CHECK(mercator->projection() == ProjectionKind::spherical_mercator);
  CHECK(mercator->to_string() == "mercator:10.5");
  CHECK(LocationFrame::parse("mercator:10,5").error().parameter == "frame");
  CHECK(LocationFrame::parse("utm:1,2").error().parameter == "projection");
  CHECK(LocationFrame::parse("local:abc,1").error().parameter == "frame.origin_lon");
  CHECK(LocationFrame::parse("local:1").error().parameter == "frame");
  CHECK(LocationFrame::create(ProjectionKind::local_equidistant, 0, 90).error().parameter ==
        "frame.origin_lat");
  CHECK(LocationFrame::create(ProjectionKind::local_equidistant, 181, 0).error().code ==
        ErrorCode::out_of_range);
  CHECK(LocationFrame::create(ProjectionKind::local_equidistant, NAN, 0).error().code ==
        ErrorCode::not_finite);
}

TEST_CASE("location frame: the wire form round-trips, a bad one is rejected by name",
          "[common][frame][wire]") {
  const std::string bytes = framed_location_request("q", 1e-3, kManhattan);
  auto parsed = wire::request_from_wire(*wire::parse_device_request(bytes_of(bytes)));
  REQUIRE(parsed.has_value());
  REQUIRE(parsed->frame().has_value());
  CHECK(*parsed->frame() == kManhattan);
  CHECK(wire::serialize(wire::request_to_wire(*parsed)) == bytes);
  v1::DeviceRequest bad = *wire::parse_device_request(bytes_of(bytes));
  bad.mutable_frame()->set_origin_lat(95);
  CHECK(wire::request_from_wire(bad).error().parameter == "frame.origin_lat");
  bad.mutable_frame()->set_projection(static_cast<v1::Projection>(9));
  CHECK(wire::request_from_wire(bad).error().parameter == "frame.projection");
}

TEST_CASE("location frame: lon/lat projected on the device, other frames refused by name",
          "[client][frame]") {
  // ρ = 1e6 on a device of that capacity: σ ≈ 7e-4 m, so the release shows the projection.
  auto device = client::Device::open_for_simulation(*DeviceConfig::cgp(1e7), 11, 0);
  auto early = device.set_location_lonlat("location", -73.96, 40.76);
  REQUIRE_FALSE(early.ok());
  CHECK(early.error().parameter == "frame");

  REQUIRE(device.set_location_frame(kManhattan).ok());
  REQUIRE(device.location_frame() == kManhattan);
  REQUIRE(device.set_location_lonlat("location", -73.96, 40.76).ok());
  const auto expected = kManhattan.projector().value().forward(-73.96, 40.76).value();
  CHECK(std::hypot(expected[0], expected[1]) > 1000);  // a real offset, about 1.4 km

  const auto same =
      parse_reply(device.handle(bytes_of(framed_location_request("a", 1e6, kManhattan))));
  REQUIRE(same.status() == v1::ANSWERED);
  CHECK(std::abs(same.values(0) - expected[0]) < 0.05);  // 70 σ: never by chance
  CHECK(std::abs(same.values(1) - expected[1]) < 0.05);
  const auto unstamped =
      parse_reply(device.handle(bytes_of(framed_location_request("b", 1e6, {}))));
  CHECK(unstamped.status() == v1::ANSWERED);  // a coordinator that announces no frame

  const double spent = device.spent();
  const auto other =
      parse_reply(device.handle(bytes_of(framed_location_request("c", 1e6, kBrooklyn))));
  CHECK(other.status() == v1::REJECTED_INVALID);
  CHECK(other.error() == v1::INVALID_ARGUMENT);
  CHECK(other.error_message().find("frame") != std::string::npos);
  CHECK(device.spent() == spent);  // charged nothing

  // Re-projected in the new frame, the same request id now gets an answer in it.
  REQUIRE(device.set_location_frame(kBrooklyn).ok());
  REQUIRE(device.set_location_lonlat("location", -73.96, 40.76).ok());
  CHECK(
      parse_reply(device.handle(bytes_of(framed_location_request("d", 1e6, kBrooklyn)))).status() ==
      v1::ANSWERED);
  // Metres set directly claim no frame: any stamped request reads them as given.
  const double metres[2] = {1, 2};
  REQUIRE(device.set_component("location", metres).ok());
  CHECK(parse_reply(device.handle(bytes_of(framed_location_request("e", 1e6, kManhattan))))
            .status() == v1::ANSWERED);
  // A frame centred far away places the fix too (clamped at the service area's edge), and a
  // Mercator frame is refused whatever the position: no outcome depends on where the user is.
  const auto far = LocationFrame::create(ProjectionKind::local_equidistant, 100, -40).value();
  REQUIRE(device.set_location_frame(far).ok());
  REQUIRE(device.set_location_lonlat("location", -73.96, 40.76).ok());
  const auto clamped = parse_reply(device.handle(bytes_of(framed_location_request("f", 1e6, far))));
  REQUIRE(clamped.status() == v1::ANSWERED);
  CHECK(std::hypot(clamped.values(0), clamped.values(1)) <
        geometry::FrameProjection::kServiceRadius);  // ~500 km from the antipode: folded
  const auto mercator = LocationFrame::create(ProjectionKind::spherical_mercator, -74, 0).value();
  const auto refused = device.set_location_frame(mercator);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().parameter == "frame.projection");
  CHECK(device.location_frame() == far);  // kept as it was
  REQUIRE(device.set_location_frame(kManhattan).ok());
  CHECK(device.set_location_lonlat("location", -77.04, 38.90).ok());   // Washington, 330 km
  CHECK(device.set_location_lonlat("location", -87.63, 41.88).ok());   // Chicago, 1,150 km
  CHECK(device.set_location_lonlat("location", -118.24, 34.05).ok());  // Los Angeles: clamped
  // A component registered through the C ABI (no unit) takes lon/lat too.
  REQUIRE(device.register_component("plain", 2).ok());
  CHECK(device.set_location_lonlat("plain", -73.96, 40.76).ok());
  CHECK(device.set_location_lonlat("location", -73.96, 95).error().parameter == "lat");
  CHECK(device.set_location_lonlat("location", NAN, 40).error().parameter == "lon");
}
