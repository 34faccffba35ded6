#include <bit>
#include <boost/geometry.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "cgp/common/geometry/region.hpp"
#include "cgp/common/geometry/signed_distance.hpp"
#include "support/errors.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::geometry;
namespace bg = boost::geometry;

namespace {

using BgPoint = bg::model::d2::point_xy<double>;
using BgPolygon = bg::model::polygon<BgPoint>;

// An L-shaped (concave) outline 100 × 80 with a square hole and a triangular hole.
Polygon l_shape_with_holes() {
  Ring outer{{0, 0}, {100, 0}, {100, 30}, {40, 30}, {40, 80}, {0, 80}};
  Ring square_hole{{10, 10}, {20, 10}, {20, 20}, {10, 20}};
  Ring triangle_hole{{10, 40}, {30, 45}, {15, 70}};
  return *Polygon::create(outer, {square_hole, triangle_hole});
}

BgPolygon to_boost(const Polygon& polygon) {
  BgPolygon out;
  for (const auto& p : polygon.outer()) out.outer().push_back(BgPoint(p[0], p[1]));
  for (const auto& hole : polygon.holes()) {
    out.inners().emplace_back();
    for (const auto& p : hole) out.inners().back().push_back(BgPoint(p[0], p[1]));
  }
  bg::correct(out);
  return out;
}

// Dense samples of a polygon's boundary, spacing ≤ h.
std::vector<Point2> sample_boundary(const Polygon& polygon, double h) {
  std::vector<Point2> samples;
  auto add_ring = [&](const Ring& ring) {
    for (std::size_t i = 0; i < ring.size(); ++i) {
      const auto& a = ring[i];
      const auto& b = ring[(i + 1) % ring.size()];
      double length = std::hypot(b[0] - a[0], b[1] - a[1]);
      int steps = static_cast<int>(std::ceil(length / h));
      for (int s = 0; s < steps; ++s) {
        double t = static_cast<double>(s) / steps;
        samples.push_back({a[0] + t * (b[0] - a[0]), a[1] + t * (b[1] - a[1])});
      }
    }
  };
  add_ring(polygon.outer());
  for (const auto& hole : polygon.holes()) add_ring(hole);
  return samples;
}

double nearest_sample(const std::vector<Point2>& samples, double x, double y) {
  // The least squared distance, one square root at the end (std::hypot per sample made this the
  // slowest test under qemu: 77 s on armhf).
  double best = INFINITY;
  for (const auto& s : samples) {
    const double dx = s[0] - x, dy = s[1] - y;
    best = std::min(best, dx * dx + dy * dy);
  }
  return std::sqrt(best);
}

}  // namespace

TEST_CASE("Proj of a polygon with holes matches a boundary-sampling oracle and Boost within",
          "[geometry][proj]") {
  CGP_SEEDED(11);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> x(-30, 130), y(-30, 110);
  Polygon polygon = l_shape_with_holes();
  Region region = polygon;
  BgPolygon boost_polygon = to_boost(polygon);
  const double h = 0.01;
  auto samples = sample_boundary(polygon, h);
  int inside_count = 0;
  for (int i = 0; i < 3000; ++i) {
    double p[2] = {x(rng), y(rng)};
    INFO("point (" << p[0] << ", " << p[1] << ")");
    double proj = signed_distance(region, p);
    double oracle = nearest_sample(samples, p[0], p[1]);
    // Sampling at spacing h overestimates the distance by at most h/2.
    CHECK(std::fabs(proj) <= oracle + 1e-9);
    CHECK(std::fabs(proj) >= oracle - h / 2 - 1e-9);
    // Distances from Boost.Geometry agree too (0 inside, so compare outside points only).
    if (proj > 0)
      CHECK(proj == Approx(bg::distance(BgPoint(p[0], p[1]), boost_polygon)).epsilon(1e-12));
    if (std::fabs(proj) > 1e-9) {
      bool within = bg::within(BgPoint(p[0], p[1]), boost_polygon);
      CHECK((proj < 0) == within);
      inside_count += within;
    }
  }
  CHECK(inside_count > 300);  // the sample exercises both signs
}

TEST_CASE("Proj of boxes and balls matches boundary-sampling oracles", "[geometry][proj]") {
  CGP_SEEDED(12);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> coord(-3, 5);
  double lo[3] = {0, 0, 0}, hi[3] = {2, 1, 3};
  Region box = *Box::create(lo, hi);
  // Face samples of the 3-D box at spacing h.
  const double h = 0.02;
  std::vector<std::array<double, 3>> faces;
  for (int axis = 0; axis < 3; ++axis) {
    int u = (axis + 1) % 3, v = (axis + 2) % 3;
    for (double side : {lo[axis], hi[axis]})
      for (double a = lo[u]; a <= hi[u] + 1e-12; a += h)
        for (double b = lo[v]; b <= hi[v] + 1e-12; b += h) {
          std::array<double, 3> q{};
          q[axis] = side;
          q[u] = a;
          q[v] = b;
          faces.push_back(q);
        }
  }
  for (int i = 0; i < 300; ++i) {
    double p[3] = {coord(rng), coord(rng), coord(rng)};
    double best = INFINITY;  // squared, then its root
    for (const auto& q : faces)
      best = std::min(best, (q[0] - p[0]) * (q[0] - p[0]) + (q[1] - p[1]) * (q[1] - p[1]) +
                                (q[2] - p[2]) * (q[2] - p[2]));
    best = std::sqrt(best);
    double proj = signed_distance(box, p);
    bool inside_box = p[0] > 0 && p[0] < 2 && p[1] > 0 && p[1] < 1 && p[2] > 0 && p[2] < 3;
    CHECK((proj < 0) == inside_box);
    CHECK(std::fabs(proj) <= best + 1e-9);
    CHECK(std::fabs(proj) >= best - h - 1e-9);  // face grid spacing h: at most h·√2/2 off
  }
  double centre[2] = {1, -2};
  Region disc = *Ball::create(centre, 3);
  const int samples = 20000;
  const double spacing = 2 * M_PI * 3 / samples;
  std::vector<Point2> circle;  // the disc's boundary at spacing `spacing`
  for (int k = 0; k < samples; ++k) {
    double angle = 2 * M_PI * k / samples;
    circle.push_back({1 + 3 * std::cos(angle), -2 + 3 * std::sin(angle)});
  }
  for (int i = 0; i < 300; ++i) {
    double p[2] = {coord(rng), coord(rng)};
    const double best = nearest_sample(circle, p[0], p[1]);
    double proj = signed_distance(disc, p);
    CHECK(std::fabs(proj) <= best + 1e-9);
    CHECK(std::fabs(proj) >= best - spacing / 2 - 1e-9);
    CHECK((proj < 0) == (std::hypot(p[0] - 1, p[1] + 2) < 3));
  }
}

TEST_CASE("Proj is 1-Lipschitz (Lemma 6.3) for every region kind", "[geometry][proj][lemma6.3]") {
  CGP_SEEDED(13);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> coord(-40, 140);
  std::normal_distribution<double> step(0, 5);
  double lo[2] = {10, 20}, hi[2] = {60, 50}, centre[2] = {50, 50};
  std::vector<Region> regions{*Box::create(lo, hi), *Ball::create(centre, 30),
                              l_shape_with_holes()};
  for (const auto& region : regions) {
    for (int i = 0; i < 20000; ++i) {
      double u[2] = {coord(rng), coord(rng)};
      // Half near pairs (which cross boundaries often), half far pairs.
      double v[2];
      if (i % 2 == 0) {
        v[0] = u[0] + step(rng);
        v[1] = u[1] + step(rng);
      } else {
        v[0] = coord(rng);
        v[1] = coord(rng);
      }
      double gap = std::hypot(u[0] - v[0], u[1] - v[1]);
      double change = std::fabs(signed_distance(region, u) - signed_distance(region, v));
      CHECK(change <= gap * (1 + 1e-12) + 1e-12);
    }
  }
}

TEST_CASE("Proj sign conventions: negative inside, positive outside, zero on the boundary",
          "[geometry][proj]") {
  double lo[2] = {0, 0}, hi[2] = {4, 2};
  Region box = *Box::create(lo, hi);
  double in[2] = {1, 1}, out[2] = {7, 6}, edge[2] = {4, 1}, corner[2] = {0, 0};
  CHECK(signed_distance(box, in) == -1);
  CHECK(signed_distance(box, out) == 5);
  CHECK(signed_distance(box, edge) == 0);
  CHECK(signed_distance(box, corner) == 0);
  CHECK_FALSE(inside(box, edge));
  CHECK(inside(box, in));
  Region polygon = l_shape_with_holes();
  double in_hole[2] = {15, 15}, in_body[2] = {5, 5}, on_vertex[2] = {40, 30};
  CHECK(signed_distance(polygon, in_hole) == Approx(5));  // inside a hole is outside Γ
  CHECK(signed_distance(polygon, in_body) == Approx(-5));
  CHECK(signed_distance(polygon, on_vertex) == 0);
}

TEST_CASE("len_p and the checked entry points", "[geometry]") {
  double u[3] = {1, 2, 2}, origin[3] = {0, 0, 0};
  CHECK(euclidean_distance(u, origin) == 3);
  CHECK(*checked_euclidean_distance(u, origin) == 3);
  double two[2] = {1, 1};
  CGP_REQUIRE_ERROR(checked_euclidean_distance(two, origin), ErrorCode::dimension_mismatch,
                    "point");
  double bad[3] = {1, NAN, 0};
  CGP_REQUIRE_ERROR(checked_euclidean_distance(bad, origin), ErrorCode::not_finite, "point[1]");
  double lo[2] = {0, 0}, hi[2] = {1, 1};
  Region box = *Box::create(lo, hi);
  CGP_REQUIRE_ERROR(checked_signed_distance(box, u), ErrorCode::dimension_mismatch, "point");
  double nan_point[2] = {NAN, 0};
  CGP_REQUIRE_ERROR(checked_signed_distance(box, nan_point), ErrorCode::not_finite, "point[0]");
  CHECK(dimension(box) == 2);
  CHECK(dimension(Region(l_shape_with_holes())) == 2);
}

TEST_CASE("Box and Ball reject bad input by name", "[geometry][validation]") {
  std::vector<double> lo{0, 0}, hi{1, 1}, hi3{1, 1, 1}, flat{1, 0}, nan2{NAN, 1};
  CGP_REQUIRE_ERROR(Box::create(lo, hi3), ErrorCode::dimension_mismatch, "box.hi");
  CGP_REQUIRE_ERROR(Box::create(lo, flat), ErrorCode::degenerate_polygon, "box.hi[1]");
  CGP_REQUIRE_ERROR(Box::create(nan2, hi), ErrorCode::not_finite, "box.lo[0]");
  CGP_REQUIRE_ERROR(Box::create(std::vector<double>{}, std::vector<double>{}),
                    ErrorCode::dimension_mismatch, "box.lo");
  std::vector<double> huge(kMaxDimension + 1, 0.0);
  CGP_REQUIRE_ERROR(Box::create(huge, huge), ErrorCode::too_large, "box.lo");
  CGP_REQUIRE_ERROR(Ball::create(lo, 0), ErrorCode::not_positive, "ball.radius");
  CGP_REQUIRE_ERROR(Ball::create(lo, INFINITY), ErrorCode::not_finite, "ball.radius");
  CGP_REQUIRE_ERROR(Ball::create(nan2, 1), ErrorCode::not_finite, "ball.center[0]");
}

TEST_CASE("count_inside counts the points whose signed distance is < 0", "[geometry]") {
  CGP_SEEDED(4407);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> coordinate(-12, 12);
  for (std::size_t d : {1, 2, 3, 4}) {
    INFO("dimension " << d);
    std::vector<double> lo(d), hi(d);
    for (std::size_t k = 0; k < d; ++k) lo[k] = -5.0 - static_cast<double>(k), hi[k] = 7.5;
    const double centre[4] = {0.5, -1, 2, 0};
    std::vector<Region> regions{*Box::create(lo, hi), *Ball::create({centre, d}, 6)};
    if (d == 2) regions.push_back(l_shape_with_holes());
    // Random points, and points on the box's faces and corners (and at ±0).
    std::vector<double> points;
    for (int i = 0; i < 3000; ++i) {
      for (std::size_t k = 0; k < d; ++k) {
        const auto pick = rng() % 6;
        points.push_back(pick == 0   ? lo[k]
                         : pick == 1 ? hi[k]
                         : pick == 2 ? (rng() % 2 ? 0.0 : -0.0)
                         : pick == 3 ? std::nextafter(lo[k], 0.0)
                                     : coordinate(rng));
      }
    }
    const std::size_t n = points.size() / d;
    for (const Region& region : regions) {
      std::vector<double> distance(n);
      signed_distances(region, points.data(), n, distance.data());
      std::size_t expected = 0;
      for (double v : distance) expected += v < 0;
      CHECK(count_inside(region, points.data(), n) == expected);
      CHECK(expected > 0);
      CHECK(expected < n);
    }
  }
}

TEST_CASE("batch distances in 2-D give the bits of one point at a time, ±0 and faces included",
          "[geometry]") {
  // The 2-D batches run whole groups of four through vector kernels and the rest through the
  // scalar code: every count from 0 to 11 and a long one, from every start, bit for bit.
  CGP_SEEDED(4408);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> coordinate(-12, 12);
  const double lo[2] = {-5, -0.0}, hi[2] = {7.5, 3};
  const Box box = *Box::create(lo, hi);
  const Region region = box;
  const double centre[2] = {0.0, -0.0};
  std::vector<double> points;
  for (int i = 0; i < 600; ++i)
    for (std::size_t k = 0; k < 2; ++k) {
      const auto pick = rng() % 6;
      points.push_back(pick == 0   ? lo[k]
                       : pick == 1 ? hi[k]
                       : pick == 2 ? (rng() % 2 ? 0.0 : -0.0)
                       : pick == 3 ? std::nextafter(hi[k], 0.0)
                                   : coordinate(rng));
    }
  const auto same_bits = [](double a, double b) {
    return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
  };
  std::size_t negative_zeros = 0, checked = 0;
  std::vector<std::size_t> counts{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 597};
  // The CPU's vector code (AVX2 here where it has it), then the baseline's (SSE2 on x86-64);
  // the CPU's again when the test ends, failed or not.
  struct PickByCpu {
    ~PickByCpu() { detail::use_baseline_vectors(false); }
  } restore;
  for (bool baseline : {false, true})
    for (std::size_t start : {0, 1, 2, 3})
      for (std::size_t count : counts) {
        INFO("baseline vectors " << baseline << ", start " << start << ", count " << count);
        detail::use_baseline_vectors(baseline);
        const double* at = points.data() + 2 * start;
        std::vector<double> boxed(count), from_centre(count);
        signed_distances(region, at, count, boxed.data());
        euclidean_distances(centre, at, count, from_centre.data());
        for (std::size_t i = 0; i < count; ++i) {
          const std::span<const double> point{at + 2 * i, 2};
          const double one_box = signed_distance(box, point);
          const double one_centre = euclidean_distance(point, centre);
          if (!same_bits(boxed[i], one_box) || !same_bits(from_centre[i], one_centre)) {
            FAIL("point (" << point[0] << ", " << point[1] << "): box " << boxed[i] << " vs "
                           << one_box << ", centre " << from_centre[i] << " vs " << one_centre);
          }
          negative_zeros += std::signbit(point[0]) && point[0] == 0;
          ++checked;
        }
      }
  // The comparison met what it is for: faces, ±0 coordinates, points inside and out.
  CHECK(checked > 2000);
  CHECK(negative_zeros > 0);
}
