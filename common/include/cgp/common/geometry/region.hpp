// Ranges Γ for range counting (paper §6.2): axis-aligned boxes and balls in any dimension, and
// simple 2-D polygons with holes. Objects exist only in a validated state: build them with
// create(), which returns a named error for bad input.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "cgp/common/expected.hpp"

namespace cgp::geometry {

// Documented limits (also enforced on the wire, see cgp/common/wire/limits.hpp).
inline constexpr std::size_t kMaxDimension = 4096;
inline constexpr std::size_t kMaxPolygonVertices = 10000;  // over all rings of one polygon
inline constexpr std::size_t kMaxPolygonHoles = 1000;
// Every public coordinate (a query point, a box's corners, a ball's centre ± radius, a polygon's
// vertices) lies in [−kMaxCoordinate, kMaxCoordinate]: ~1.07e9, far beyond any projected
// location in metres. The bound keeps polygon validation free of integer overflow inside
// Boost.Geometry and every distance computation free of floating-point overflow (region.md).
inline constexpr double kMaxCoordinate = 0x1p30;

// out_of_range naming the first coordinate outside [−kMaxCoordinate, kMaxCoordinate] (or
// not_finite). Checked before anything else looks at the values.
Status require_public_coordinates(std::string_view parameter, std::span<const double> values);

// {x : lo ≤ x ≤ hi}, lo < hi in every coordinate.
class Box {
 public:
  static Expected<Box> create(std::span<const double> lo, std::span<const double> hi);
  std::size_t dimension() const noexcept { return lo_.size(); }
  std::span<const double> lo() const noexcept { return lo_; }
  std::span<const double> hi() const noexcept { return hi_; }

 private:
  std::vector<double> lo_, hi_;
};

// {x : ‖x − center‖ ≤ radius}, radius > 0. A disc in 2-D.
class Ball {
 public:
  static Expected<Ball> create(std::span<const double> center, double radius);
  std::size_t dimension() const noexcept { return center_.size(); }
  std::span<const double> center() const noexcept { return center_; }
  double radius() const noexcept { return radius_; }

 private:
  std::vector<double> center_;
  double radius_ = 0;
};

using Point2 = std::array<double, 2>;
using Ring = std::vector<Point2>;

// A simple polygon with holes: rings without self-intersections, holes inside the outer ring
// and not nested in one another, positive area. Either orientation is accepted; a closing
// vertex equal to the first and repeated consecutive vertices are dropped.
class Polygon {
 public:
  static Expected<Polygon> create(Ring outer, std::vector<Ring> holes = {});
  const Ring& outer() const noexcept { return outer_; }
  const std::vector<Ring>& holes() const noexcept { return holes_; }
  std::size_t vertex_count() const noexcept { return edges_.size(); }

  // Boundary edges as flat arrays, for the distance loop: edge k runs from (ax[k], ay[k]) to
  // (bx[k], by[k]); shared vertices are stored bit-identically so the crossing test is exact.
  struct Edges {
    std::vector<double> ax, ay, bx, by, inv_len2;
    std::size_t size() const noexcept { return ax.size(); }
  };
  const Edges& edges() const noexcept { return edges_; }

 private:
  Ring outer_;
  std::vector<Ring> holes_;
  Edges edges_;
};

using Region = std::variant<Box, Ball, Polygon>;

std::size_t dimension(const Region& region) noexcept;

}  // namespace cgp::geometry
