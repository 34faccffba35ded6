#include "device_vectors.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cgp/client/device.hpp"
#include "cgp/client/privatizer.hpp"
#include "cgp/common/device_config.hpp"
#include "cgp/common/request.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/v1/cgp.pb.h"
#include "support/hex_text.hpp"

namespace cgp::conformance {

using nlohmann::json;
using test::bytes_from_hex;
using test::bytes_to_hex;
using test::double_from_hex;
using test::hex_double;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Builds one group's cases: each request is serialized deterministically, as the coordinator
// sends it.
class GroupBuilder {
 public:
  GroupBuilder(std::string name, std::string about, double capacity, bool sticky_halt) {
    group_ = {{"name", std::move(name)},          {"about", std::move(about)},
              {"capacity", hex_double(capacity)}, {"sticky_halt", sticky_halt},
              {"components", json::array()},      {"cases", json::array()}};
  }
  GroupBuilder& component(const std::string& id, const std::vector<double>& value) {
    json values = json::array();
    for (double v : value) values.push_back(hex_double(v));
    group_["components"].push_back({{"id", id}, {"value", values}});
    return *this;
  }
  // A request message; `round` numbers the cases unless the request sets its own id.
  v1::DeviceRequest request(double rho, const std::string& component = "location") {
    v1::DeviceRequest r;
    r.mutable_id()->set_query_id("conformance");
    r.mutable_id()->set_round(static_cast<std::uint32_t>(group_["cases"].size() + 1));
    r.set_component_id(component);
    r.set_rho(rho);
    r.mutable_location();
    return r;
  }
  // A request made by request() gets its case's round here (requests are edited between
  // cases); ids a case sets on purpose are kept.
  void add(const std::string& name, const std::string& about, v1::DeviceRequest r) {
    if (r.has_id() && r.id().query_id() == "conformance" && r.id().round() != 0)
      r.mutable_id()->set_round(static_cast<std::uint32_t>(group_["cases"].size() + 1));
    add_bytes(name, about, wire::serialize(r));
  }
  void add_bytes(const std::string& name, const std::string& about, const std::string& bytes) {
    group_["cases"].push_back(
        {{"name", name}, {"about", about}, {"request_hex", bytes_to_hex(bytes)}});
  }
  json done() { return std::move(group_); }

 private:
  json group_;
};

v1::Region* region_of(v1::DeviceRequest& r) {
  return r.mutable_signed_distance_to_region()->mutable_region();
}
void ring(v1::Ring* out, const std::vector<std::pair<double, double>>& points) {
  for (auto [x, y] : points) {
    out->add_xy(x);
    out->add_xy(y);
  }
}
// A regular n-gon of radius r around (cx, cy), counter-clockwise.
std::vector<std::pair<double, double>> regular(std::size_t n, double cx, double cy, double r) {
  std::vector<std::pair<double, double>> points;
  for (std::size_t k = 0; k < n; ++k) {
    const double a = 2 * M_PI * static_cast<double>(k) / static_cast<double>(n);
    points.emplace_back(cx + r * std::cos(a), cy + r * std::sin(a));
  }
  return points;
}

// ρ log-uniform in [lo, hi], from a fixed generator: the same file on every machine.
std::vector<double> sweep(std::mt19937_64& rng, std::size_t count, double lo, double hi) {
  std::vector<double> out;
  for (std::size_t k = 0; k < count; ++k) {
    const double u = static_cast<double>(rng() >> 11) * 0x1p-53;
    out.push_back(std::exp(std::log(lo) + u * (std::log(hi) - std::log(lo))));
  }
  return out;
}

json location_group(std::mt19937_64& rng) {
  GroupBuilder g("location", "2-D location, capacity 1: minimum rho, a sweep of rho, bad requests",
                 1.0, false);
  g.component("location", {1234.5, -987.25});
  const double min_rho = std::ldexp(1.0, -18);
  g.add("minimum-rho", "rho = capacity·2^-18 exactly is answered", g.request(min_rho));
  g.add("below-minimum-rho", "the double below capacity·2^-18 is OUT_OF_RANGE",
        g.request(std::nextafter(min_rho, 0.0)));
  std::size_t k = 0;
  for (double rho : sweep(rng, 60, min_rho, 0x1p-8))
    g.add("sweep-" + std::to_string(++k), "a rho between the minimum and 2^-8", g.request(rho));
  for (auto [name, rho] : std::vector<std::pair<std::string, double>>{
           {"rho-zero", 0.0}, {"rho-negative", -0.5}, {"rho-nan", kNaN}, {"rho-inf", kInf}})
    g.add(name, "rho must be finite and > 0", g.request(rho));
  g.add("rho-huge", "rho = 1e308: 2·rho overflows, no usable noise scale: OUT_OF_RANGE",
        g.request(1e308));
  g.add("unknown-component", "no such component on the device", g.request(0.01, "altitude"));
  {
    auto r = g.request(0.01);
    r.clear_id();
    g.add("missing-id", "a request without id", r);
    r = g.request(0.01);
    r.mutable_id()->set_query_id("");
    g.add("empty-query-id", "id.query_id must not be empty", r);
    r = g.request(0.01);
    r.mutable_id()->set_round(0);
    g.add("round-zero", "id.round is 1-based", r);
    r = g.request(0.01);
    r.mutable_id()->set_query_id(std::string(129, 'q'));
    g.add("long-query-id", "id.query_id over 128 bytes", r);
    r = g.request(0.01);
    r.set_component_id("");
    g.add("empty-component-id", "component_id must not be empty", r);
    r = g.request(0.01);
    r.clear_location();
    g.add("missing-statistic", "none of location, distance_to_point, signed_distance_to_region", r);
  }
  g.add_bytes("malformed-bytes", "bytes that do not parse as cgp.v1.DeviceRequest",
              std::string("\xff\xff\xff\xff\x0f not a request", 20));
  {  // replays: the same id and content returns the stored reply; other content conflicts
    auto r = g.request(0.01);
    r.mutable_id()->set_query_id("replayed");
    r.mutable_id()->set_round(1);
    g.add("replay-first", "answered and recorded", r);
    g.add("replay-again", "the same id and content: the identical reply, no new charge", r);
    r.set_rho(0.02);
    g.add("replay-conflict", "the same id with other content: REQUEST_CONFLICT", r);
  }
  {  // frames: a component set in metres claims no frame and is read as given
    auto r = g.request(0.01);
    r.mutable_frame()->set_projection(v1::PROJECTION_LOCAL_EQUIDISTANT);
    r.mutable_frame()->set_origin_lon(-73.97);
    r.mutable_frame()->set_origin_lat(40.78);
    g.add("frame-local-metres", "a local frame on a component set in metres: answered", r);
    r.mutable_frame()->set_projection(static_cast<v1::Projection>(99));
    g.add("frame-unknown-projection", "frame.projection 99 is unknown", r);
    r.mutable_frame()->set_projection(v1::PROJECTION_LOCAL_EQUIDISTANT);
    r.mutable_frame()->set_origin_lat(91);
    g.add("frame-bad-origin", "origin_lat outside (-90, 90)", r);
    r.mutable_frame()->set_origin_lat(90);
    g.add("frame-pole-origin", "origin_lat 90: the interval is open", r);
    r.mutable_frame()->set_projection(v1::PROJECTION_SPHERICAL_MERCATOR);
    r.mutable_frame()->set_origin_lat(40.78);
    g.add("frame-mercator-latitude",
          "a mercator frame has a central meridian only: origin_lat "
          "must be 0",
          r);
    r.mutable_frame()->set_origin_lat(0);
    g.add("frame-mercator-metres", "a mercator frame on a component set in metres: answered", r);
    r.mutable_frame()->set_projection(v1::PROJECTION_UNSPECIFIED);
    r.mutable_frame()->set_origin_lon(12.5);
    g.add("frame-unspecified-origin",
          "projection 0 with an origin: no frame (the origin is not read); answered", r);
  }
  return g.done();
}

json budget_group(bool sticky) {
  GroupBuilder g(sticky ? "budget-sticky" : "budget",
                 sticky ? "capacity 1e-3 with sticky halt: after the first refusal every request "
                          "is refused"
                        : "capacity 1e-3: charges add up, a charge that does not fit is refused "
                          "and a smaller one after it may still fit",
                 1e-3, sticky);
  g.component("location", {10, 20});
  for (int k = 1; k <= 4; ++k) g.add("spend-" + std::to_string(k), "rho = 3e-4", g.request(3e-4));
  g.add("too-large-after", "rho = 1e-4 does not fit what is left", g.request(1e-4));
  g.add("small-after", "rho = 5e-5 fits unless halted", g.request(5e-5));
  g.add("tiny-after", "rho = 1e-6 fits unless halted", g.request(1e-6));
  return g.done();
}

json geometry_group(std::mt19937_64& rng) {
  GroupBuilder g("regions", "distances to a point and signed distances to regions, capacity 10",
                 10.0, false);
  g.component("location", {150.25, -75.5});
  auto point = [&](std::vector<double> p, double rho) {
    auto r = g.request(rho);
    auto* to = r.mutable_distance_to_point();
    for (double v : p) to->add_point(v);
    return r;
  };
  g.add("point", "distance to a point", point({0, 0}, 0.5));
  g.add("point-far", "a point a thousand kilometres away", point({1e6, -1e6}, 1e-3));
  g.add("point-beyond-capacity-box",
        "at capacity 10 the grid is at most 2^-24 (u ≤ 2^-21·σ_cap) and the box ±2^24: a point "
        "at 1e8 is OUT_OF_RANGE (rho) at every rho",
        point({1e8, 0}, 1e-3));
  g.add("point-dimension", "a 3-D point for a 2-D component: DIMENSION_MISMATCH",
        point({1, 2, 3}, 0.5));
  g.add("point-beyond-2^30", "a coordinate beyond ±2^30: OUT_OF_RANGE", point({0x1p31, 0}, 0.5));
  g.add("point-nan", "a coordinate that is NaN: NOT_FINITE", point({kNaN, 0}, 0.5));
  g.add("point-empty", "a point with no coordinate: MISSING_FIELD", point({}, 0.5));
  g.add("point-beyond-grid-box",
        "rho = 1 gives u = 2^-25 and a box of ±2^23: a point at 1e7 is OUT_OF_RANGE (rho)",
        point({1e7, 0}, 1.0));
  auto region = [&](double rho) { return g.request(rho); };
  {
    auto r = region(0.5);
    auto* box = region_of(r)->mutable_box();
    for (double v : {-100.0, -100.0}) box->add_lo(v);
    for (double v : {100.0, 100.0}) box->add_hi(v);
    g.add("box", "signed distance to a box", r);
    box->set_hi(1, -100);
    g.add("box-degenerate", "hi not above lo: DEGENERATE_POLYGON", r);
    r = region(0.5);
    box = region_of(r)->mutable_box();
    box->add_lo(0);
    box->add_hi(1);
    g.add("box-dimension", "a 1-D box for a 2-D component: DIMENSION_MISMATCH", r);
  }
  {
    auto r = region(0.5);
    auto* ball = region_of(r)->mutable_ball();
    ball->add_center(10);
    ball->add_center(10);
    ball->set_radius(500);
    g.add("ball", "signed distance to a ball", r);
    ball->set_radius(0);
    g.add("ball-zero-radius", "radius must be > 0: NOT_POSITIVE", r);
    ball->set_radius(0x1p30);
    g.add("ball-beyond-2^30", "a ball reaching beyond ±2^30: OUT_OF_RANGE", r);
  }
  {
    auto r = region(0.5);
    auto* polygon = region_of(r)->mutable_polygon();
    ring(polygon->mutable_outer(), {{0, 0}, {400, 0}, {400, 400}, {0, 400}});
    g.add("polygon-square", "a square", r);
    ring(polygon->add_holes(), {{100, 100}, {300, 100}, {300, 300}, {100, 300}});
    g.add("polygon-hole", "a square with a square hole", r);
    {  // a replay is matched on the request as normalized: a closing vertex is the same ring
      auto again = region(0.5);
      again.mutable_id()->set_query_id("ring-replay");
      ring(region_of(again)->mutable_polygon()->mutable_outer(),
           {{0, 0}, {400, 0}, {400, 400}, {0, 400}});
      g.add("ring-first", "a square, answered", again);
      again.mutable_signed_distance_to_region()->mutable_region()->mutable_polygon()->clear_outer();
      ring(region_of(again)->mutable_polygon()->mutable_outer(),
           {{0, 0}, {400, 0}, {400, 0}, {400, 400}, {0, 400}, {0, 0}});
      g.add("ring-replay-normalized",
            "the same id with the square's ring repeated and closed: the same request after "
            "cleaning, so the identical reply",
            again);
    }
    r = region(0.5);
    polygon = region_of(r)->mutable_polygon();
    ring(polygon->mutable_outer(), {{0, 0}, {400, 400}, {400, 0}, {0, 400}});
    g.add("polygon-bow-tie", "edges that cross: SELF_INTERSECTING_POLYGON", r);
    r = region(0.5);
    polygon = region_of(r)->mutable_polygon();
    ring(polygon->mutable_outer(), {{0, 0}, {400, 0}, {800, 0}});
    g.add("polygon-collinear", "no area: DEGENERATE_POLYGON", r);
    r = region(0.5);
    polygon = region_of(r)->mutable_polygon();
    ring(polygon->mutable_outer(), {{0, 0}, {400, 0}});
    g.add("polygon-two-vertices", "fewer than 3 distinct vertices", r);
    r = region(0.5);
    region_of(r)->mutable_polygon()->mutable_outer()->add_xy(1);
    g.add("polygon-odd-xy", "xy must hold x, y pairs: DIMENSION_MISMATCH", r);
    r = region(0.5);
    region_of(r)->mutable_polygon();
    g.add("polygon-no-outer", "polygon.outer is missing: MISSING_FIELD", r);
    r = region(0.5);
    ring(region_of(r)->mutable_polygon()->mutable_outer(), regular(2000, 0, 0, 1000));
    g.add("polygon-2000-gon", "a large valid polygon (2,000 vertices)", r);
    r = region(0.5);
    ring(region_of(r)->mutable_polygon()->mutable_outer(), regular(10001, 0, 0, 1000));
    g.add("polygon-huge", "10,001 vertices, over the limit of 10,000: TOO_LARGE", r);
    r = region(0.5);
    region_of(r);
    g.add("region-empty", "a region with no shape: MISSING_FIELD", r);
  }
  std::size_t k = 0;
  for (double rho : sweep(rng, 40, 10 * 0x1p-18, 0.2)) {
    g.add("point-sweep-" + std::to_string(++k), "distance to (5, 5) at a swept rho",
          point({5, 5}, rho));
  }
  return g.done();
}

json vector_group(std::mt19937_64& rng) {
  GroupBuilder g("vector-784", "a 784-d component (an image), capacity 1000", 1000.0, false);
  std::vector<double> image(784);
  for (std::size_t i = 0; i < image.size(); ++i) image[i] = static_cast<double>((i * 37) % 256);
  g.component("image", image);
  g.add("location-784", "the whole vector: 784 values", g.request(10.0, "image"));
  auto r = g.request(1.0, "image");
  for (std::size_t i = 0; i < 784; ++i) r.mutable_distance_to_point()->add_point(128);
  g.add("distance-784", "distance to a 784-d point", r);
  std::size_t k = 0;
  for (double rho : sweep(rng, 30, 1000 * 0x1p-18, 5.0))
    g.add("sweep-" + std::to_string(++k), "the whole vector at a swept rho",
          g.request(rho, "image"));
  return g.done();
}

json capacity_group(double capacity, std::mt19937_64& rng) {
  GroupBuilder g("capacity-" + hex_double(capacity),
                 "the plan at an extreme capacity: the grid follows the capacity", capacity, false);
  g.component("location", {3.5, -2.25});
  g.add("minimum-rho", "capacity·2^-18", g.request(std::ldexp(capacity, -18)));
  std::size_t k = 0;
  for (double rho : sweep(rng, 20, std::ldexp(capacity, -18), capacity / 64))
    g.add("sweep-" + std::to_string(++k), "a swept rho", g.request(rho));
  g.add("whole-capacity", "rho whose charge exceeds the capacity: refused", g.request(capacity));
  return g.done();
}

std::string status_name(int status) {
  const std::string& name = v1::ReplyStatus_Name(status);
  return name.empty() ? std::to_string(status) : name;
}

}  // namespace

json device_vector_definitions() {
  std::mt19937_64 rng(20261127);
  json groups = json::array();
  groups.push_back(location_group(rng));
  groups.push_back(budget_group(false));
  groups.push_back(budget_group(true));
  groups.push_back(geometry_group(rng));
  groups.push_back(vector_group(rng));
  for (double capacity : {0x1p-40, 1e-6, 1e6, 0x1p40})
    groups.push_back(capacity_group(capacity, rng));
  return groups;
}

json evaluate_group(const json& group) {
  const double capacity = double_from_hex(group.at("capacity").get<std::string>());
  auto config = DeviceConfig::cgp(capacity, group.at("sticky_halt").get<bool>());
  if (!config) throw std::runtime_error("capacity: " + config.error().message);
  auto device = client::Device::open_for_simulation(*config, 1, 0);
  for (const auto& component : group.at("components")) {
    std::vector<double> value;
    for (const auto& v : component.at("value"))
      value.push_back(double_from_hex(v.get<std::string>()));
    const auto id = component.at("id").get<std::string>();
    if (!device.register_component(id, value.size()) || !device.set_component(id, value))
      throw std::runtime_error("component " + id + " could not be set");
  }
  json expects = json::array();
  for (const auto& c : group.at("cases")) {
    const std::string request_bytes = bytes_from_hex(c.at("request_hex").get<std::string>());
    const std::string reply_bytes = device.handle(std::span(
        reinterpret_cast<const std::uint8_t*>(request_bytes.data()), request_bytes.size()));
    v1::DeviceReply reply;
    if (!reply.ParseFromString(reply_bytes)) throw std::runtime_error("reply does not parse");
    json expect = {{"status", status_name(reply.status())},
                   {"error", v1::ErrorCode_Name(reply.error())},
                   {"charged_rho", hex_double(reply.charged_rho())},
                   {"remaining_budget", hex_double(reply.remaining_budget())},
                   {"values", reply.values_size()}};
    if (reply.status() == v1::ANSWERED) {
      v1::DeviceRequest request;
      request.ParseFromString(request_bytes);
      const auto parsed = wire::request_from_wire(request);
      if (!parsed) throw std::runtime_error("an answered request does not parse");
      const auto plan =
          client::plan_noise(lipschitz_constant(parsed->statistic()), request.rho(), capacity);
      if (!plan) throw std::runtime_error("an answered request has no plan");
      expect["grid_exponent"] = plan->grid_exponent;
      expect["sigma2_grid"] = std::to_string(plan->sigma2_grid);
    }
    expects.push_back(std::move(expect));
  }
  return expects;
}

}  // namespace cgp::conformance
