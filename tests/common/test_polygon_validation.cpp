#include <catch2/catch.hpp>
#include <cmath>

#include "cgp/common/geometry/region.hpp"
#include "cgp/common/geometry/signed_distance.hpp"
#include "support/errors.hpp"

using namespace cgp;
using namespace cgp::geometry;

namespace {
const Ring kSquare{{0, 0}, {10, 0}, {10, 10}, {0, 10}};
}

TEST_CASE("polygon: either orientation, closing vertex and repeats are accepted",
          "[geometry][polygon]") {
  Ring clockwise(kSquare.rbegin(), kSquare.rend());
  Ring closed = kSquare;
  closed.push_back(kSquare.front());
  Ring repeated{{0, 0}, {10, 0}, {10, 0}, {10, 10}, {0, 10}, {0, 10}};
  double centre[2] = {5, 5};
  for (const Ring& ring : {kSquare, clockwise, closed, repeated}) {
    auto polygon = Polygon::create(ring);
    REQUIRE(polygon.has_value());
    CHECK(polygon->vertex_count() == 4);
    CHECK(signed_distance(*polygon, centre) == -5);
  }
}

TEST_CASE("polygon: every kind of bad input gets its named error", "[geometry][polygon]") {
  SECTION("empty") {
    CGP_REQUIRE_ERROR(Polygon::create(Ring{}), ErrorCode::empty_polygon, "polygon.outer");
    CGP_REQUIRE_ERROR(Polygon::create(Ring{{0, 0}, {1, 1}}), ErrorCode::empty_polygon,
                      "polygon.outer");
    CGP_REQUIRE_ERROR(Polygon::create(Ring{{0, 0}, {1, 1}, {0, 0}}), ErrorCode::empty_polygon,
                      "polygon.outer");
  }
  SECTION("degenerate: collinear outer ring") {
    CGP_REQUIRE_ERROR(Polygon::create(Ring{{0, 0}, {1, 1}, {2, 2}, {3, 3}}),
                      ErrorCode::degenerate_polygon, "polygon.outer");
  }
  SECTION("degenerate: collinear hole") {
    CGP_REQUIRE_ERROR(Polygon::create(kSquare, {Ring{{1, 1}, {2, 2}, {3, 3}}}),
                      ErrorCode::degenerate_polygon, "polygon.holes[0]");
  }
  SECTION("self-intersecting: a bow tie") {
    CGP_REQUIRE_ERROR(Polygon::create(Ring{{0, 0}, {10, 10}, {10, 0}, {0, 10}}),
                      ErrorCode::self_intersecting_polygon, "polygon.outer");
    CGP_REQUIRE_ERROR(Polygon::create(Ring{{0, 0}, {10, 10}, {10, 0}, {0, 5}}),
                      ErrorCode::self_intersecting_polygon, "polygon.outer");
    CGP_REQUIRE_ERROR(Polygon::create(kSquare, {Ring{{1, 1}, {5, 5}, {5, 1}, {1, 5}}}),
                      ErrorCode::self_intersecting_polygon, "polygon.holes[0]");
  }
  SECTION("self-intersecting: a hole crossing the outer ring") {
    CGP_REQUIRE_ERROR(Polygon::create(kSquare, {Ring{{5, 5}, {15, 5}, {15, 8}, {5, 8}}}),
                      ErrorCode::self_intersecting_polygon, "polygon");
  }
  SECTION("hole outside the outer ring") {
    CGP_REQUIRE_ERROR(Polygon::create(kSquare, {Ring{{20, 20}, {30, 20}, {30, 30}}}),
                      ErrorCode::degenerate_polygon, "polygon.holes");
  }
  SECTION("nested holes") {
    CGP_REQUIRE_ERROR(Polygon::create(kSquare, {Ring{{1, 1}, {9, 1}, {9, 9}, {1, 9}},
                                                Ring{{2, 2}, {8, 2}, {8, 8}, {2, 8}}}),
                      ErrorCode::degenerate_polygon, "polygon.holes");
  }
  SECTION("non-finite coordinates") {
    CGP_REQUIRE_ERROR(Polygon::create(Ring{{0, 0}, {NAN, 0}, {1, 1}}), ErrorCode::not_finite,
                      "polygon.outer[1]");
    CGP_REQUIRE_ERROR(Polygon::create(kSquare, {Ring{{1, 1}, {2, 1}, {2, INFINITY}}}),
                      ErrorCode::not_finite, "polygon.holes[0][2]");
  }
  SECTION("too many vertices") {
    Ring big;
    for (std::size_t i = 0; i <= kMaxPolygonVertices; ++i) {
      double angle = 2 * M_PI * static_cast<double>(i) / (kMaxPolygonVertices + 1);
      big.push_back({std::cos(angle), std::sin(angle)});
    }
    CGP_REQUIRE_ERROR(Polygon::create(big), ErrorCode::too_large, "polygon");
  }
  SECTION("too many holes") {
    std::vector<Ring> holes(kMaxPolygonHoles + 1, Ring{{1, 1}, {2, 1}, {2, 2}});
    CGP_REQUIRE_ERROR(Polygon::create(kSquare, holes), ErrorCode::too_large, "polygon.holes");
  }
}

TEST_CASE("polygon: a large valid polygon at the vertex limit is accepted", "[geometry][polygon]") {
  Ring big;
  for (std::size_t i = 0; i < kMaxPolygonVertices; ++i) {
    double angle = 2 * M_PI * static_cast<double>(i) / kMaxPolygonVertices;
    big.push_back({1000 * std::cos(angle), 1000 * std::sin(angle)});
  }
  auto polygon = Polygon::create(big);
  REQUIRE(polygon.has_value());
  double centre[2] = {0, 0};
  CHECK(signed_distance(*polygon, centre) == Approx(-1000).epsilon(1e-6));
}
