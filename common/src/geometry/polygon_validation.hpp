// Boost.Geometry stays in one translation unit (it is slow to compile and not part of our API).
#pragma once

#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/region.hpp"

namespace cgp::geometry::detail {

// Drops closing and repeated consecutive vertices, checks coordinates, ring sizes, simplicity,
// hole placement and area with Boost.Geometry. On success the rings are ready for Polygon.
Status normalize_and_validate_polygon(Ring& outer, std::vector<Ring>& holes);

}  // namespace cgp::geometry::detail
