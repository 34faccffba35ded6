#include "cgp/common/geometry/region.hpp"

#include <cmath>
#include <string>

#include "cgp/common/validate.hpp"
#include "polygon_validation.hpp"

namespace cgp::geometry {
namespace {

Status require_dimension_in_limits(std::string_view parameter, std::size_t dimension) {
  if (dimension == 0) {
    return make_error(ErrorCode::dimension_mismatch, parameter,
                      std::string(parameter) + " must have at least one coordinate, got 0");
  }
  if (dimension > kMaxDimension) {
    return make_error(ErrorCode::too_large, parameter,
                      std::string(parameter) + " has dimension " + std::to_string(dimension) +
                          ", over the limit of " + std::to_string(kMaxDimension));
  }
  return {};
}

void append_ring_edges(const Ring& ring, Polygon::Edges& edges) {
  for (std::size_t i = 0; i < ring.size(); ++i) {
    const Point2& a = ring[i];
    const Point2& b = ring[(i + 1) % ring.size()];
    double dx = b[0] - a[0], dy = b[1] - a[1];
    edges.ax.push_back(a[0]);
    edges.ay.push_back(a[1]);
    edges.bx.push_back(b[0]);
    edges.by.push_back(b[1]);
    // An edge too short for 1/len² (|dx|, |dy| < ~1e-154) counts as its start point: the
    // distance then errs by at most the edge's length (region.md).
    const double inv_len2 = 1.0 / (dx * dx + dy * dy);
    edges.inv_len2.push_back(std::isfinite(inv_len2) ? inv_len2 : 0.0);
  }
}

}  // namespace

Status require_public_coordinates(std::string_view parameter, std::span<const double> values) {
  CGP_RETURN_IF_ERROR(require_all_finite(parameter, values));
  for (std::size_t k = 0; k < values.size(); ++k) {
    if (!(std::fabs(values[k]) <= kMaxCoordinate)) {
      std::string name = indexed_name(parameter, k);
      return make_error(ErrorCode::out_of_range, name,
                        name + " must lie in [-" + format_number(kMaxCoordinate) + ", " +
                            format_number(kMaxCoordinate) + "], got " + format_number(values[k]));
    }
  }
  return {};
}

Expected<Box> Box::create(std::span<const double> lo, std::span<const double> hi) {
  CGP_RETURN_IF_ERROR(require_dimension_in_limits("box.lo", lo.size()));
  CGP_RETURN_IF_ERROR(require_dimension("box.hi", hi, lo.size()));
  CGP_RETURN_IF_ERROR(require_public_coordinates("box.lo", lo));
  CGP_RETURN_IF_ERROR(require_public_coordinates("box.hi", hi));
  for (std::size_t k = 0; k < lo.size(); ++k) {
    if (!(lo[k] < hi[k])) {
      std::string parameter = indexed_name("box.hi", k);
      return make_error(ErrorCode::degenerate_polygon, parameter,
                        parameter + " must be greater than " + indexed_name("box.lo", k) + " = " +
                            format_number(lo[k]) + ", got " + format_number(hi[k]));
    }
  }
  Box box;
  box.lo_.assign(lo.begin(), lo.end());
  box.hi_.assign(hi.begin(), hi.end());
  return box;
}

Expected<Ball> Ball::create(std::span<const double> center, double radius) {
  CGP_RETURN_IF_ERROR(require_dimension_in_limits("ball.center", center.size()));
  CGP_RETURN_IF_ERROR(require_public_coordinates("ball.center", center));
  CGP_RETURN_IF_ERROR(require_finite_positive("ball.radius", radius));
  for (std::size_t k = 0; k < center.size(); ++k) {
    if (!(std::fabs(center[k]) + radius <= kMaxCoordinate)) {
      return make_error(ErrorCode::out_of_range, "ball.radius",
                        "ball.radius = " + format_number(radius) + " reaches outside [-" +
                            format_number(kMaxCoordinate) + ", " + format_number(kMaxCoordinate) +
                            "] from " + indexed_name("ball.center", k) + " = " +
                            format_number(center[k]));
    }
  }
  Ball ball;
  ball.center_.assign(center.begin(), center.end());
  ball.radius_ = radius;
  return ball;
}

Expected<Polygon> Polygon::create(Ring outer, std::vector<Ring> holes) {
  if (holes.size() > kMaxPolygonHoles) {
    return make_error(ErrorCode::too_large, "polygon.holes",
                      "polygon.holes has " + std::to_string(holes.size()) +
                          " rings, over the limit of " + std::to_string(kMaxPolygonHoles));
  }
  std::size_t vertices = outer.size();
  for (const Ring& hole : holes) vertices += hole.size();
  if (vertices > kMaxPolygonVertices) {
    return make_error(ErrorCode::too_large, "polygon",
                      "polygon has " + std::to_string(vertices) + " vertices, over the limit of " +
                          std::to_string(kMaxPolygonVertices));
  }
  CGP_RETURN_IF_ERROR(detail::normalize_and_validate_polygon(outer, holes));
  Polygon polygon;
  polygon.outer_ = std::move(outer);
  polygon.holes_ = std::move(holes);
  append_ring_edges(polygon.outer_, polygon.edges_);
  for (const Ring& hole : polygon.holes_) append_ring_edges(hole, polygon.edges_);
  return polygon;
}

std::size_t dimension(const Region& region) noexcept {
  return std::visit(
      [](const auto& r) -> std::size_t {
        if constexpr (std::is_same_v<std::decay_t<decltype(r)>, Polygon>)
          return 2;
        else
          return r.dimension();
      },
      region);
}

}  // namespace cgp::geometry
