#include "cgp/common/geometry/frame_projection.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "cgp/common/validate.hpp"

namespace cgp::geometry {
namespace {

// WGS 84: semi-major axis, flattening, semi-minor axis b = a(1 − f), and the least radius of
// curvature a(1 − e²) = b²/a (the meridian's at the equator).
constexpr double kA = 6378137.0;
constexpr double kFlattening = 1 / 298.257223563;
constexpr double kB = kA * (1 - kFlattening);
constexpr double kMinRadiusOfCurvature = kB * kB / kA;

// The angle between two fixes seen from the centre of the unit sphere with the same (lon, lat)
// (haversine). Any path on the ellipsoid is at least kMinRadiusOfCurvature times as long as
// its image on that sphere, so the geodesic distance is at least kMinRadiusOfCurvature × this.
double central_angle(double lon0, double lat0, double lon1, double lat1) {
  constexpr double degree = std::numbers::pi / 180;
  const double phi0 = lat0 * degree, phi1 = lat1 * degree;
  const double half_dphi = (phi1 - phi0) / 2, half_dlambda = (lon1 - lon0) * degree / 2;
  const double h = std::sin(half_dphi) * std::sin(half_dphi) + std::cos(phi0) * std::cos(phi1) *
                                                                   std::sin(half_dlambda) *
                                                                   std::sin(half_dlambda);
  return 2 * std::asin(std::min(1.0, std::sqrt(h)));
}

// g(s): the radius in frame metres of a fix at geodesic distance s from the origin. The
// identity in the service area, then held at its edge, then brought down to 0 no faster than
// L per metre and never above L·b·sin(s/b), the least circumference-per-radian a circle of
// geodesic radius s can have on WGS 84 (whose curvature is at most 1/b²) times L.
double clamped_radius(double s, double lipschitz) {
  const double held = std::min(s, FrameProjection::kServiceRadius);
  const double circle_bound = lipschitz * kB * std::sin(s / kB);
  const double fold_bound = lipschitz * (FrameProjection::kFoldEnd - s);
  return std::max(0.0, std::min({held, circle_bound, fold_bound}));
}

}  // namespace

double FrameProjection::lipschitz_bound() noexcept {
  static const double bound = kServiceRadius / (kB * std::sin(kServiceRadius / kB));
  return bound;
}

Expected<FrameProjection> FrameProjection::create(const LocationFrame& frame) {
  if (frame.projection() != ProjectionKind::local_equidistant)
    return make_error(ErrorCode::invalid_argument, "frame.projection",
                      "frame.projection: a device answers only in a local frame; " +
                          frame.to_string() +
                          " stretches ground distances by 1/cos(lat) and has a seam at its "
                          "antimeridian, so its metres do not bound what a release reveals");
  CGP_ASSIGN_OR_RETURN(auto projector, frame.projector());
  return FrameProjection(frame, std::move(projector));
}

Expected<std::array<double, 2>> FrameProjection::project(double lon, double lat) const {
  CGP_RETURN_IF_ERROR(require_lonlat(lon, lat));
  // Near the antipode the geodesic polar coordinates (and Vincenty's iteration behind the
  // projection) break down; every fix there maps to the origin, which g reaches by kFoldEnd.
  const double lower_bound =
      kMinRadiusOfCurvature * central_angle(frame_.origin_lon(), frame_.origin_lat(), lon, lat);
  if (lower_bound >= kFoldEnd) return std::array<double, 2>{0.0, 0.0};
  auto xy = projector_.forward(lon, lat);
  // Not seen in the tests' 4×10^5 fixes; if it ever fails, the fix goes where the fold sends every
  // fix it cannot place, so that a failure is never an outcome of its own.
  if (!xy) return std::array<double, 2>{0.0, 0.0};
  const double s = std::hypot((*xy)[0], (*xy)[1]);
  if (s <= kServiceRadius) return *xy;  // the frame's own metres, bit for bit
  const double scale = clamped_radius(s, lipschitz_bound()) / s;
  return std::array<double, 2>{(*xy)[0] * scale, (*xy)[1] * scale};
}

}  // namespace cgp::geometry
