#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cgp/client/device.hpp"
#include "cgp/common/wire/limits.hpp"
#include "device_fixtures.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::client;
using test::bytes_of;
using test::location_request_bytes;
using test::parse_reply;

namespace {
// A scratch SQLite path, removed (with its WAL files) when the test ends.
struct TempLedger {
  std::filesystem::path path;
  TempLedger() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("cgp-ledger-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".db");
    remove_all();
  }
  ~TempLedger() { remove_all(); }
  void remove_all() const {
    for (const char* suffix : {"", "-wal", "-shm", "-journal"})
      std::filesystem::remove(path.string() + suffix);
  }
  const char* c_str() const { return path.c_str(); }
};

Device secure_device(const DeviceConfig& config, const char* path) {
  auto device = Device::open_secure(config, path);
  REQUIRE(device.has_value());
  REQUIRE(device->register_component("location", 2).ok());
  double here[2] = {10, 20};
  REQUIRE(device->set_component("location", here).ok());
  return std::move(*device);
}

v1::DeviceReply expect_rejected(Device& device, const std::string& bytes, ErrorCode code) {
  const double before = device.remaining();
  auto reply = parse_reply(device.handle(bytes_of(bytes)));
  INFO("error message: " << reply.error_message());
  CHECK(reply.status() == v1::REJECTED_INVALID);
  CHECK(static_cast<int>(reply.error()) == static_cast<int>(code));
  CHECK(reply.values_size() == 0);
  CHECK(reply.charged_rho() == 0);
  CHECK(device.remaining() == before);
  CHECK(reply.remaining_budget() == before);
  return reply;
}
}  // namespace

TEST_CASE("device: every bad input of DESIGN §5 gets its named error and charges nothing",
          "[client][device]") {
  auto device = test::located_device(*DeviceConfig::cgp(1.0), 5);
  auto with_rho = [](double rho) {
    auto r = *wire::parse_device_request(bytes_of(location_request_bytes("q", 1, 0.1)));
    r.set_rho(rho);
    return wire::serialize(r);
  };
  SECTION("rho NaN, inf, zero, negative") {
    CHECK(
        expect_rejected(device, with_rho(NAN), ErrorCode::not_finite).error_message().find("rho") !=
        std::string::npos);
    expect_rejected(device, with_rho(INFINITY), ErrorCode::not_finite);
    expect_rejected(device, with_rho(0), ErrorCode::not_positive);
    expect_rejected(device, with_rho(-1), ErrorCode::not_positive);
  }
  SECTION("wrong dimension") {
    auto r = *DeviceRequest::distance_to_point({"q", 1}, "location", {1, 2, 3}, 0.1);
    expect_rejected(device, wire::serialize(wire::request_to_wire(r)),
                    ErrorCode::dimension_mismatch);
  }
  SECTION("unknown component, and a component without a value") {
    expect_rejected(device, location_request_bytes("q", 1, 0.1, "home"),
                    ErrorCode::unknown_component);
    REQUIRE(device.register_component("home", 2).ok());
    expect_rejected(device, location_request_bytes("q", 1, 0.1, "home"),
                    ErrorCode::component_not_set);
  }
  SECTION("degenerate and self-intersecting polygons") {
    v1::DeviceRequest r =
        *wire::parse_device_request(bytes_of(location_request_bytes("q", 1, 0.1)));
    auto* ring =
        r.mutable_signed_distance_to_region()->mutable_region()->mutable_polygon()->mutable_outer();
    for (double v : {0.0, 0.0, 1.0, 1.0, 2.0, 2.0}) ring->add_xy(v);
    expect_rejected(device, wire::serialize(r), ErrorCode::degenerate_polygon);
    ring->clear_xy();
    for (double v : {0.0, 0.0, 10.0, 10.0, 10.0, 0.0, 0.0, 10.0}) ring->add_xy(v);
    expect_rejected(device, wire::serialize(r), ErrorCode::self_intersecting_polygon);
  }
  SECTION("oversized and malformed messages") {
    std::string huge(wire::kMaxMessageBytes + 1, 'x');
    expect_rejected(device, huge, ErrorCode::too_large);
    expect_rejected(device, std::string("\xff\xff\xff", 3), ErrorCode::malformed_message);
  }
  SECTION("a replayed id with different content") {
    auto first = parse_reply(device.handle(bytes_of(location_request_bytes("q", 7, 0.1))));
    REQUIRE(first.status() == v1::ANSWERED);
    expect_rejected(device, location_request_bytes("q", 7, 0.2), ErrorCode::request_conflict);
  }
  SECTION("a value on the component that is not finite, or of the wrong dimension") {
    double bad[2] = {NAN, 0};
    CHECK(device.set_component("location", bad).error().code == ErrorCode::not_finite);
    double three[3] = {1, 2, 3};
    CHECK(device.set_component("location", three).error().code == ErrorCode::dimension_mismatch);
    CHECK(device.set_component("nowhere", three).error().code == ErrorCode::unknown_component);
    CHECK(device.register_component("location", 3).error().code == ErrorCode::dimension_mismatch);
    CHECK(device.register_component("", 3).error().parameter == "component_id");
    CHECK(device.register_component("x", 0).error().parameter == "dimension");
    CHECK(device.register_component("height", 1, "m").ok());
    CHECK(device.register_component("height", 1, "ft").error().parameter == "unit");
    CHECK(device.register_component("y", 1, std::string(33, 'u')).error().code ==
          ErrorCode::too_large);
  }
}

TEST_CASE("device: an answer is phi(x) plus noise, every reply reports the budget",
          "[client][device]") {
  auto device = test::located_device(*DeviceConfig::cgp(1e7), 9, 300, 400);
  auto request = *DeviceRequest::distance_to_point({"q", 1}, "location", {0, 0}, 1e4);  // σ ≈ 7 mm
  auto reply = device.handle(request);
  REQUIRE(reply.status == ReplyStatus::answered);
  REQUIRE(reply.values.size() == 1);
  CHECK(reply.values[0] == Approx(500).margin(0.05));
  CHECK(reply.remaining_budget == Approx(1e7 - reply.charged_rho).epsilon(1e-12));
  double lo[2] = {0, 0}, hi[2] = {1000, 1000};
  auto inside = device.handle(*DeviceRequest::signed_distance_to_region(
      {"q", 2}, "location", *geometry::Box::create(lo, hi), 1e4));
  REQUIRE(inside.status == ReplyStatus::answered);
  CHECK(inside.values[0] == Approx(-300).margin(0.05));
  CHECK(device.secure_randomness() == false);  // a simulation device says so
}

TEST_CASE("device: idempotent replay returns identical bytes and charges nothing",
          "[client][device]") {
  auto device = test::located_device(*DeviceConfig::cgp(1.0), 11);
  std::string request = location_request_bytes("query-1", 3, 0.2);
  std::string first = device.handle(bytes_of(request));
  const double after_first = device.remaining();
  for (int i = 0; i < 5; ++i) CHECK(device.handle(bytes_of(request)) == first);
  CHECK(device.remaining() == after_first);
  // The in-process path sees the same cached answer.
  auto same = device.handle(*DeviceRequest::location({"query-1", 3}, "location", 0.2));
  const auto first_reply = parse_reply(first);
  CHECK(same.values ==
        std::vector<double>(first_reply.values().begin(), first_reply.values().end()));
  CHECK(device.remaining() == after_first);
}

TEST_CASE("device: SQLite ledger restores budget and replies across close/reopen",
          "[client][device][ledger]") {
  TempLedger ledger;
  auto config = *DeviceConfig::cgp(1.0);
  std::string request = location_request_bytes("q", 1, 0.3);
  std::string first;
  double remaining = 0;
  {
    auto device = secure_device(config, ledger.c_str());
    CHECK(device.secure_randomness());
    first = device.handle(bytes_of(request));
    REQUIRE(parse_reply(first).status() == v1::ANSWERED);
    remaining = device.remaining();
  }
  {
    auto device = secure_device(config, ledger.c_str());
    REQUIRE(device.ledger_status().ok());
    CHECK(device.remaining() == remaining);
    CHECK(device.handle(bytes_of(request)) == first);  // identical bytes after reopening
    CHECK(device.remaining() == remaining);
    auto conflict = parse_reply(device.handle(bytes_of(location_request_bytes("q", 1, 0.31))));
    CHECK(conflict.error() == v1::REQUEST_CONFLICT);
  }
}

TEST_CASE("device: a corrupt or foreign ledger fails closed and never resets the budget",
          "[client][device][ledger]") {
  auto config = *DeviceConfig::cgp(1.0);
  SECTION("garbage file") {
    TempLedger ledger;
    {
      std::ofstream out(ledger.path, std::ios::binary);
      out << std::string(8192, '\x5a');
    }
    auto device = secure_device(config, ledger.c_str());
    CHECK(device.ledger_status().error().code == ErrorCode::ledger_failure);
    CHECK(device.remaining() == 0);
    auto reply = parse_reply(device.handle(bytes_of(location_request_bytes("q", 1, 0.1))));
    CHECK(reply.status() == v1::REJECTED_INVALID);
    CHECK(reply.error() == v1::LEDGER_FAILURE);
  }
  SECTION("a ledger written for another configuration") {
    TempLedger ledger;
    { auto device = secure_device(config, ledger.c_str()); }
    auto device = secure_device(*DeviceConfig::cgp(2.0), ledger.c_str());
    CHECK(device.ledger_status().error().code == ErrorCode::ledger_failure);
    CHECK(device.ledger_status().error().message.find("different device configuration") !=
          std::string::npos);
  }
  SECTION("an unreadable path") {
    auto device = secure_device(config, "/nonexistent-dir/ledger.db");
    CHECK(device.ledger_status().error().code == ErrorCode::ledger_failure);
    CHECK(parse_reply(device.handle(bytes_of(location_request_bytes("q", 1, 0.1)))).error() ==
          v1::LEDGER_FAILURE);
  }
}

TEST_CASE("device: sticky HALT is durable", "[client][device][ledger]") {
  TempLedger ledger;
  auto config = *DeviceConfig::cgp(1.0, true);
  {
    auto device = secure_device(config, ledger.c_str());
    CHECK(parse_reply(device.handle(bytes_of(location_request_bytes("q", 1, 2.0)))).status() ==
          v1::REFUSED_BUDGET);
  }
  auto device = secure_device(config, ledger.c_str());
  CHECK(device.remaining() == 0);
  CHECK(parse_reply(device.handle(bytes_of(location_request_bytes("q", 2, 0.01)))).status() ==
        v1::REFUSED_BUDGET);
}

TEST_CASE("device: a request whose own coordinates exceed the noise grid's box is rejected",
          "[client][device]") {
  auto device = test::located_device(*DeviceConfig::cgp(1e12), 21);
  // ρ = 1e10: σ ≈ 7 µm, box ≈ ±2^24 σ ≈ ±119 m; the polygon reaches 5 km.
  auto request = *DeviceRequest::signed_distance_to_region(
      {"far", 1}, "location",
      *geometry::Polygon::create(geometry::Ring{{0, 0}, {5000, 0}, {5000, 5000}}), 1e10);
  const double before = device.spent();
  auto reply = device.handle(request);
  CHECK(reply.status == ReplyStatus::rejected_invalid);
  CHECK(reply.error.code == ErrorCode::out_of_range);
  CHECK(device.spent() == before);
}
