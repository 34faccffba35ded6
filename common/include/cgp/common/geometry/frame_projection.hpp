// The device's map from a GPS fix to a location frame's metres: the frame's own projection in
// its service area, a public non-expansive clamp outside it, and no seam anywhere (proof:
// common/src/geometry/frame_projection.md). What a device releases about its position is
// then Lipschitz in ground metres with one constant for every frame it accepts, so no frame a
// coordinator announces, and no position, makes a release cheaper than its charge says.
#pragma once

#include <array>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/location_frame.hpp"
#include "cgp/common/geometry/projection.hpp"

namespace cgp::geometry {

class FrameProjection {
 public:
  // The service area: positions within this geodesic distance (WGS 84) of the frame's origin
  // are projected exactly as the coordinator projects its own data (LonLatProjection).
  static constexpr double kServiceRadius = 1.5e6;  // metres
  // Beyond this distance from the origin (near its antipode) every position maps to the origin.
  static constexpr double kFoldEnd = 1.95e7;  // metres
  // The map's Lipschitz constant against WGS 84 geodesic distance: A / (b·sin(A/b)) with
  // A = kServiceRadius and b the semi-minor axis, ≈ 1.009341 (frame_projection.md); the
  // computed map keeps ‖f(p) − f(q)‖ ≤ L·d(p, q) + ε with ε ≤ 1 cm (Vincenty's accuracy and
  // Boost's 1e-10 rad snap to the origin: sub-millimetre in the service area).
  static double lipschitz_bound() noexcept;

  // Devices accept local (azimuthal equidistant) frames only: a Mercator frame stretches
  // distances by 1/cos(lat) and has a seam at its antimeridian, so it is refused whatever the
  // device's position (invalid_argument naming "frame.projection").
  static Expected<FrameProjection> create(const LocationFrame& frame);

  const LocationFrame& frame() const noexcept { return frame_; }

  // A GPS fix (geometry::require_lonlat: errors name "lon"/"lat") to frame metres. Never fails
  // for a valid fix, and no outcome depends on where the fix is: inside the service area it is
  // the frame's projection; outside it, the point at the same azimuth from the origin at radius
  // g(s) ≤ kServiceRadius, s the geodesic distance from the origin (frame_projection.md).
  Expected<std::array<double, 2>> project(double lon, double lat) const;

 private:
  FrameProjection(LocationFrame frame, LonLatProjection projector)
      : frame_(frame), projector_(std::move(projector)) {}
  LocationFrame frame_;
  LonLatProjection projector_;
};

}  // namespace cgp::geometry
