// lon/lat (degrees, WGS 84) to planar metres. The choice is explicit in every API that takes
// lon/lat: a budget in "Mercator metres" is not a budget in metres (spherical Mercator stretches
// distances by 1/cos(latitude), about 1.3 at New York), so there is no default.
#pragma once

#include <array>
#include <memory>
#include <span>
#include <string_view>

#include "cgp/common/expected.hpp"

namespace cgp::geometry {

enum class ProjectionKind {
  // Azimuthal equidistant on the WGS 84 ellipsoid centred on the data (Boost.Geometry srs,
  // "+proj=aeqd"): distances from the centre are true, and within 100 km of it any distance is
  // within 0.1% of the geodesic one. What privacy in metres means.
  local_equidistant,
  // Spherical ("web") Mercator, R = 6378137 m, as in the paper's experiments (§7). Distances
  // are stretched by 1/cos(latitude): use only to compare with the paper.
  spherical_mercator,
};

// "local" | "mercator" (cgp-sim's --projection).
Expected<ProjectionKind> parse_projection_kind(std::string_view name);
std::string_view projection_kind_name(ProjectionKind kind) noexcept;

// The factor by which spherical Mercator stretches distances at a latitude: 1/cos(lat).
Expected<double> mercator_scale_factor(double lat_degrees);

class LonLatProjection {
 public:
  // origin: (lon, lat) in degrees. For local_equidistant it is the centre of the projection
  // (choose the centre of the data, see lonlat_centre); for spherical_mercator lon is the
  // central meridian and lat is unused (any valid latitude).
  static Expected<LonLatProjection> create(ProjectionKind kind, double origin_lon,
                                           double origin_lat);
  LonLatProjection(LonLatProjection&&) noexcept;
  LonLatProjection& operator=(LonLatProjection&&) noexcept;
  ~LonLatProjection();

  ProjectionKind kind() const noexcept { return kind_; }
  std::array<double, 2> origin() const noexcept { return origin_; }

  // (lon, lat) degrees -> (x, y) metres. lon ∈ [−180, 180]; lat ∈ [−90, 90] (Mercator:
  // |lat| < 89.5).
  Expected<std::array<double, 2>> forward(double lon, double lat) const;
  // (x, y) metres -> (lon, lat) degrees.
  Expected<std::array<double, 2>> inverse(double x, double y) const;

 private:
  struct Impl;
  LonLatProjection(ProjectionKind kind, std::array<double, 2> origin, std::unique_ptr<Impl> impl);
  ProjectionKind kind_;
  std::array<double, 2> origin_;
  std::unique_ptr<Impl> impl_;
};

// The centre of a set of locations: midpoint of the lon/lat bounding box (lon and lat of equal
// length, non-empty, valid degrees). Data crossing the antimeridian is not supported.
Expected<std::array<double, 2>> lonlat_centre(std::span<const double> lon,
                                              std::span<const double> lat);

}  // namespace cgp::geometry
