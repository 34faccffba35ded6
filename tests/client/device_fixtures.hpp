// Helpers for device tests: requests built through the public API, and wire round trips.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cgp/client/device.hpp"
#include "cgp/common/geometry/location_frame.hpp"
#include "cgp/common/wire/codec.hpp"

namespace cgp::test {

inline std::span<const std::uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// Built directly on the wire message, so that invalid values (ρ ≤ 0, ...) can be sent too.
inline std::string location_request_bytes(const std::string& query, std::uint32_t round, double rho,
                                          const std::string& component = "location") {
  v1::DeviceRequest request;
  request.mutable_id()->set_query_id(query);
  request.mutable_id()->set_round(round);
  request.set_component_id(component);
  request.mutable_location();
  request.set_rho(rho);
  return wire::serialize(request);
}

// A location request at round 1, stamped with `frame` (none: unstamped).
inline std::string framed_location_request(const std::string& query, double rho,
                                           const std::optional<geometry::LocationFrame>& frame) {
  v1::DeviceRequest request =
      wire::parse_device_request(bytes_of(location_request_bytes(query, 1, rho))).value();
  if (frame) *request.mutable_frame() = wire::frame_to_wire(frame);
  return wire::serialize(request);
}

inline v1::DeviceReply parse_reply(const std::string& bytes) {
  auto parsed = wire::parse_device_reply(bytes_of(bytes));
  REQUIRE(parsed.has_value());
  return *parsed;
}

// A device at (x, y) with one 2-D component "location".
inline client::Device located_device(const DeviceConfig& config, std::uint64_t seed, double x = 100,
                                     double y = -50) {
  auto device = client::Device::open_for_simulation(config, seed, 0);
  REQUIRE(device.register_component("location", 2).ok());
  double here[2] = {x, y};
  REQUIRE(device.set_component("location", here).ok());
  return device;
}

}  // namespace cgp::test
