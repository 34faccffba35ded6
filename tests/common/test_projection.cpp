#include <boost/geometry.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "cgp/common/geometry/projection.hpp"
#include "support/errors.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::geometry;
namespace bg = boost::geometry;

namespace {
// Geodesic distance on the WGS 84 ellipsoid (Vincenty), an oracle independent of the projection.
double geodesic_metres(double lon1, double lat1, double lon2, double lat2) {
  using LonLat = bg::model::point<double, 2, bg::cs::geographic<bg::degree>>;
  bg::strategy::distance::vincenty<bg::srs::spheroid<double>> vincenty(
      bg::srs::spheroid<double>(6378137.0, 6356752.3142451793));
  return bg::distance(LonLat(lon1, lat1), LonLat(lon2, lat2), vincenty);
}
}  // namespace

TEST_CASE("local equidistant projection: true distances from the centre, small error nearby",
          "[geometry][projection]") {
  CGP_SEEDED(40);
  std::mt19937_64 rng(seed);
  const double lon0 = -73.95, lat0 = 40.70;  // New York
  auto projection = *LonLatProjection::create(ProjectionKind::local_equidistant, lon0, lat0);
  auto origin = *projection.forward(lon0, lat0);
  CHECK(std::fabs(origin[0]) < 1e-6);
  CHECK(std::fabs(origin[1]) < 1e-6);
  std::uniform_real_distribution<double> dlon(-0.6, 0.6), dlat(-0.45, 0.45);  // ±50 km
  for (int i = 0; i < 200; ++i) {
    double lon = lon0 + dlon(rng), lat = lat0 + dlat(rng);
    auto xy = *projection.forward(lon, lat);
    double from_centre = std::hypot(xy[0], xy[1]);
    CHECK(from_centre == Approx(geodesic_metres(lon0, lat0, lon, lat)).epsilon(1e-6));
    // Between two arbitrary points within 50 km of the centre: within 0.1%.
    double lon2 = lon0 + dlon(rng), lat2 = lat0 + dlat(rng);
    auto xy2 = *projection.forward(lon2, lat2);
    double planar = std::hypot(xy[0] - xy2[0], xy[1] - xy2[1]);
    CHECK(planar == Approx(geodesic_metres(lon, lat, lon2, lat2)).epsilon(1e-3));
    auto back = *projection.inverse(xy[0], xy[1]);
    CHECK(back[0] == Approx(lon).margin(1e-9));
    CHECK(back[1] == Approx(lat).margin(1e-9));
  }
}

TEST_CASE("spherical Mercator: the paper's projection, and its stretch", "[geometry][projection]") {
  auto mercator = *LonLatProjection::create(ProjectionKind::spherical_mercator, 0, 0);
  const double R = 6378137.0;
  auto xy = *mercator.forward(-73.95, 40.70);
  CHECK(xy[0] == Approx(R * -73.95 * M_PI / 180).epsilon(1e-12));
  CHECK(xy[1] == Approx(R * std::log(std::tan(M_PI / 4 + 40.70 * M_PI / 360))).epsilon(1e-12));
  // 1 km north at 40.7°: Mercator says about 1/cos(40.7°) ≈ 1.32 km.
  auto north = *mercator.forward(-73.95, 40.70 + 1000 / 111132.0);
  CHECK((north[1] - xy[1]) / 1000 == Approx(*mercator_scale_factor(40.7)).epsilon(0.01));
  CHECK(*mercator_scale_factor(40.7) == Approx(1.3190).epsilon(1e-3));
  auto back = *mercator.inverse(xy[0], xy[1]);
  CHECK(back[0] == Approx(-73.95).margin(1e-9));
  CHECK(back[1] == Approx(40.70).margin(1e-9));
}

TEST_CASE("projections reject bad coordinates by name", "[geometry][projection]") {
  CGP_REQUIRE_ERROR(LonLatProjection::create(ProjectionKind::local_equidistant, 200, 0),
                    ErrorCode::out_of_range, "origin_lon");
  CGP_REQUIRE_ERROR(LonLatProjection::create(ProjectionKind::local_equidistant, 0, NAN),
                    ErrorCode::not_finite, "origin_lat");
  CGP_REQUIRE_ERROR(LonLatProjection::create(ProjectionKind::spherical_mercator, 0, 90),
                    ErrorCode::out_of_range, "origin_lat");
  auto local = *LonLatProjection::create(ProjectionKind::local_equidistant, 0, 0);
  CGP_REQUIRE_ERROR(local.forward(0, 95), ErrorCode::out_of_range, "lat");
  CGP_REQUIRE_ERROR(local.forward(-181, 0), ErrorCode::out_of_range, "lon");
  CGP_REQUIRE_ERROR(local.forward(INFINITY, 0), ErrorCode::not_finite, "lon");
  CGP_REQUIRE_ERROR(local.inverse(NAN, 0), ErrorCode::not_finite, "x");
  auto mercator = *LonLatProjection::create(ProjectionKind::spherical_mercator, 0, 0);
  CGP_REQUIRE_ERROR(mercator.forward(0, 89.9), ErrorCode::out_of_range, "lat");
  CGP_REQUIRE_ERROR(mercator_scale_factor(90), ErrorCode::out_of_range, "lat");
  CHECK(*parse_projection_kind("local") == ProjectionKind::local_equidistant);
  CHECK(*parse_projection_kind("mercator") == ProjectionKind::spherical_mercator);
  CGP_REQUIRE_ERROR(parse_projection_kind("utm"), ErrorCode::invalid_argument, "projection");
}

TEST_CASE("lonlat_centre is the middle of the bounding box", "[geometry][projection]") {
  double lon[3] = {-74.2, -73.7, -74.0}, lat[3] = {40.5, 40.9, 40.6};
  auto centre = *lonlat_centre(lon, lat);
  CHECK(centre[0] == Approx(-73.95));
  CHECK(centre[1] == Approx(40.7));
  CGP_REQUIRE_ERROR(lonlat_centre({}, {}), ErrorCode::invalid_argument, "lon");
  double two[2] = {40, 41};
  CGP_REQUIRE_ERROR(lonlat_centre(lon, two), ErrorCode::dimension_mismatch, "lat");
  double bad_lat[3] = {40, 91, 40};
  CGP_REQUIRE_ERROR(lonlat_centre(lon, bad_lat), ErrorCode::out_of_range, "lat[1]");
}
