#include "polygon_validation.hpp"

#include <boost/geometry.hpp>
#include <string>

#include "cgp/common/validate.hpp"

namespace bg = boost::geometry;

namespace cgp::geometry::detail {
namespace {

using BgPoint = bg::model::d2::point_xy<double>;
using BgPolygon = bg::model::polygon<BgPoint>;

std::string ring_name(std::size_t ring_index) {
  return ring_index == 0 ? std::string("polygon.outer")
                         : indexed_name("polygon.holes", ring_index - 1);
}

Status normalize_ring(Ring& ring, std::size_t ring_index) {
  const std::string name = ring_name(ring_index);
  for (std::size_t i = 0; i < ring.size(); ++i) {
    for (int axis = 0; axis < 2; ++axis) {
      if (!std::isfinite(ring[i][axis])) {
        std::string parameter = indexed_name(name, i);
        return make_error(
            ErrorCode::not_finite, parameter,
            parameter + " must have finite coordinates, got " + format_number(ring[i][axis]));
      }
      // Before Boost sees the ring: its integer rescaling overflows on larger coordinates.
      if (!(std::fabs(ring[i][axis]) <= kMaxCoordinate)) {
        std::string parameter = indexed_name(name, i);
        return make_error(ErrorCode::out_of_range, parameter,
                          parameter + " must have coordinates in [-" +
                              format_number(kMaxCoordinate) + ", " + format_number(kMaxCoordinate) +
                              "], got " + format_number(ring[i][axis]));
      }
    }
  }
  Ring cleaned;
  cleaned.reserve(ring.size());
  for (const Point2& p : ring)
    if (cleaned.empty() || cleaned.back() != p) cleaned.push_back(p);
  while (cleaned.size() > 1 && cleaned.front() == cleaned.back()) cleaned.pop_back();
  if (cleaned.size() < 3) {
    return make_error(
        ErrorCode::empty_polygon, name,
        name + " must have at least 3 distinct vertices, got " + std::to_string(cleaned.size()));
  }
  ring = std::move(cleaned);
  return {};
}

void append_to_boost_ring(const Ring& ring, bg::model::ring<BgPoint>& out) {
  for (const Point2& p : ring) out.push_back(BgPoint(p[0], p[1]));
}

Error validity_error(bg::validity_failure_type failure) {
  switch (failure) {
    case bg::failure_self_intersections:
      return make_error(ErrorCode::self_intersecting_polygon, "polygon",
                        "polygon must be simple: its boundary intersects itself");
    case bg::failure_spikes:
      return make_error(ErrorCode::degenerate_polygon, "polygon",
                        "polygon is degenerate: a ring has a spike (an edge doubling back)");
    case bg::failure_interior_rings_outside:
      return make_error(ErrorCode::degenerate_polygon, "polygon.holes",
                        "polygon.holes must lie inside polygon.outer");
    case bg::failure_nested_interior_rings:
      return make_error(ErrorCode::degenerate_polygon, "polygon.holes",
                        "polygon.holes must not be nested in one another");
    case bg::failure_disconnected_interior:
      return make_error(ErrorCode::degenerate_polygon, "polygon.holes",
                        "polygon.holes disconnect the interior of the polygon");
    case bg::failure_few_points:
      return make_error(ErrorCode::empty_polygon, "polygon",
                        "polygon rings must have at least 3 distinct vertices");
    case bg::failure_wrong_topological_dimension:
      return make_error(ErrorCode::degenerate_polygon, "polygon",
                        "polygon is degenerate: a ring has no area");
    default:
      return make_error(
          ErrorCode::degenerate_polygon, "polygon",
          std::string("polygon is not valid: ") + bg::validity_failure_type_message(failure));
  }
}

}  // namespace

Status normalize_and_validate_polygon(Ring& outer, std::vector<Ring>& holes) {
  CGP_RETURN_IF_ERROR(normalize_ring(outer, 0));
  for (std::size_t h = 0; h < holes.size(); ++h)
    CGP_RETURN_IF_ERROR(normalize_ring(holes[h], h + 1));

  BgPolygon polygon;
  append_to_boost_ring(outer, polygon.outer());
  polygon.inners().resize(holes.size());
  for (std::size_t h = 0; h < holes.size(); ++h)
    append_to_boost_ring(holes[h], polygon.inners()[h]);
  // Orientation and closure are conventions, not user errors.
  bg::correct(polygon);

  // A crossing is the most specific diagnosis (a symmetric bow tie also has zero area), so ask
  // Boost first; zero-area rings are named next; any other invalidity last.
  auto self_crossing = [](const std::string& name) {
    return make_error(ErrorCode::self_intersecting_polygon, name,
                      name + " must be simple: its boundary intersects itself");
  };
  if (bg::intersects(polygon.outer())) return self_crossing("polygon.outer");
  for (std::size_t h = 0; h < holes.size(); ++h)
    if (bg::intersects(polygon.inners()[h])) return self_crossing(ring_name(h + 1));
  bg::validity_failure_type failure;
  bool valid = bg::is_valid(polygon, failure);
  if (!valid && failure == bg::failure_self_intersections) return validity_error(failure);
  if (!(std::fabs(bg::area(polygon.outer())) > 0)) {
    return make_error(ErrorCode::degenerate_polygon, "polygon.outer",
                      "polygon.outer is degenerate: its vertices are collinear (zero area)");
  }
  for (std::size_t h = 0; h < holes.size(); ++h) {
    if (!(std::fabs(bg::area(polygon.inners()[h])) > 0)) {
      std::string name = ring_name(h + 1);
      return make_error(ErrorCode::degenerate_polygon, name,
                        name + " is degenerate: its vertices are collinear (zero area)");
    }
  }
  if (!valid) return validity_error(failure);
  return {};
}

}  // namespace cgp::geometry::detail
