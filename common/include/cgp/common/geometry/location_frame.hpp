// The frame a coordinator's locations are in: lon/lat degrees projected to metres by
// one projection around one origin. The coordinator announces it in Welcome and stamps it on its
// requests; a device given GPS lon/lat projects on the device with it, and refuses a request
// stamped with another frame (its location would be read in the wrong metres).
#pragma once

#include <string>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/projection.hpp"

namespace cgp::geometry {

// A GPS position or frame origin in degrees: lon ∈ [−180, 180], lat ∈ (−90, 90) (the poles have
// no local frame), both finite; errors name `lon_name` / `lat_name`.
Status require_lonlat(double lon, double lat, std::string_view lon_name = "lon",
                      std::string_view lat_name = "lat");

class LocationFrame {
 public:
  // origin: lon ∈ [−180, 180], lat ∈ (−90, 90) degrees (Mercator: lon is the central
  // meridian, lat must be 0). Errors name "frame.origin_lon" / "frame.origin_lat".
  static Expected<LocationFrame> create(ProjectionKind projection, double origin_lon,
                                        double origin_lat);
  // "local:LON,LAT" or "mercator:LON" (cgp-coordinator --frame).
  static Expected<LocationFrame> parse(std::string_view text);

  ProjectionKind projection() const noexcept { return projection_; }
  double origin_lon() const noexcept { return origin_lon_; }
  double origin_lat() const noexcept { return origin_lat_; }
  // The projection this frame means: (lon, lat) -> metres.
  Expected<LonLatProjection> projector() const;
  std::string to_string() const;  // as parse reads it, with every digit

  friend bool operator==(const LocationFrame&, const LocationFrame&) = default;

 private:
  LocationFrame(ProjectionKind projection, double lon, double lat) noexcept
      : projection_(projection), origin_lon_(lon), origin_lat_(lat) {}
  ProjectionKind projection_;
  double origin_lon_, origin_lat_;
};

}  // namespace cgp::geometry
