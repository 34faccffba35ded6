#include "cgp/common/geometry/projection.hpp"

#include <algorithm>
#include <boost/geometry.hpp>
#include <boost/geometry/srs/projection.hpp>
#include <cmath>
#include <numbers>
#include <sstream>
#include <string>

#include "cgp/common/validate.hpp"

namespace bg = boost::geometry;

namespace cgp::geometry {
namespace {

using LonLat = bg::model::point<double, 2, bg::cs::geographic<bg::degree>>;
using Xy = bg::model::point<double, 2, bg::cs::cartesian>;

constexpr double kMercatorMaxLat = 89.5;

Status require_lon(std::string_view parameter, double lon) {
  CGP_RETURN_IF_ERROR(require_finite(parameter, lon));
  if (lon < -180 || lon > 180) {
    return make_error(
        ErrorCode::out_of_range, parameter,
        std::string(parameter) + " must be in [-180, 180] degrees, got " + format_number(lon));
  }
  return {};
}

Status require_lat(std::string_view parameter, double lat, double limit) {
  CGP_RETURN_IF_ERROR(require_finite(parameter, lat));
  if (lat < -limit || lat > limit) {
    return make_error(ErrorCode::out_of_range, parameter,
                      std::string(parameter) + " must be in [-" + format_number(limit) + ", " +
                          format_number(limit) + "] degrees, got " + format_number(lat));
  }
  return {};
}

std::string proj4_string(ProjectionKind kind, double lon0, double lat0) {
  std::ostringstream out;
  // Fixed notation: Boost's degree parser reads "1e-07" as 1° East (the 'e' is a hemisphere),
  // which put the projection's centre up to 10° away from an origin within 1e-4° of 0.
  out << std::fixed;
  out.precision(17);
  if (kind == ProjectionKind::local_equidistant)
    out << "+proj=aeqd +ellps=WGS84 +units=m +lat_0=" << lat0 << " +lon_0=" << lon0;
  else
    out << "+proj=merc +a=6378137 +b=6378137 +units=m +lon_0=" << lon0;
  return out.str();
}

double max_lat(ProjectionKind kind) {
  return kind == ProjectionKind::spherical_mercator ? kMercatorMaxLat : 90.0;
}

}  // namespace

struct LonLatProjection::Impl {
  bg::srs::projection<> projection;
};

Expected<ProjectionKind> parse_projection_kind(std::string_view name) {
  if (name == "local") return ProjectionKind::local_equidistant;
  if (name == "mercator") return ProjectionKind::spherical_mercator;
  return make_error(ErrorCode::invalid_argument, "projection",
                    "projection must be 'local' or 'mercator', got '" + std::string(name) + "'");
}

std::string_view projection_kind_name(ProjectionKind kind) noexcept {
  return kind == ProjectionKind::local_equidistant ? "local" : "mercator";
}

Expected<double> mercator_scale_factor(double lat_degrees) {
  CGP_RETURN_IF_ERROR(require_lat("lat", lat_degrees, kMercatorMaxLat));
  return 1.0 / std::cos(lat_degrees * std::numbers::pi / 180);
}

LonLatProjection::LonLatProjection(ProjectionKind kind, std::array<double, 2> origin,
                                   std::unique_ptr<Impl> impl)
    : kind_(kind), origin_(origin), impl_(std::move(impl)) {}
LonLatProjection::LonLatProjection(LonLatProjection&&) noexcept = default;
LonLatProjection& LonLatProjection::operator=(LonLatProjection&&) noexcept = default;
LonLatProjection::~LonLatProjection() = default;

Expected<LonLatProjection> LonLatProjection::create(ProjectionKind kind, double origin_lon,
                                                    double origin_lat) {
  if (kind != ProjectionKind::local_equidistant && kind != ProjectionKind::spherical_mercator)
    return make_error(ErrorCode::invalid_argument, "projection", "unknown projection kind");
  CGP_RETURN_IF_ERROR(require_lon("origin_lon", origin_lon));
  CGP_RETURN_IF_ERROR(require_lat("origin_lat", origin_lat, max_lat(kind)));
  try {
    auto impl = std::make_unique<Impl>(
        Impl{bg::srs::projection<>(bg::srs::proj4(proj4_string(kind, origin_lon, origin_lat)))});
    LonLatProjection projection(kind, {origin_lon, origin_lat}, std::move(impl));
    // The origin must be where the projection is centred (aeqd: at (0, 0); Mercator: x = 0 on
    // its central meridian): a parser that misread the parameters would move every location.
    auto centre = projection.forward(origin_lon,
                                     kind == ProjectionKind::local_equidistant ? origin_lat : 0.0);
    if (!centre || std::hypot((*centre)[0], (*centre)[1]) > 1e-3)
      return make_error(ErrorCode::internal_error, "projection",
                        "projection: the projection around (" + format_number(origin_lon) + ", " +
                            format_number(origin_lat) + ") is not centred on its origin");
    return projection;
  } catch (const std::exception& e) {
    return make_error(ErrorCode::invalid_argument, "projection",
                      std::string("projection could not be set up: ") + e.what());
  }
}

Expected<std::array<double, 2>> LonLatProjection::forward(double lon, double lat) const {
  CGP_RETURN_IF_ERROR(require_lon("lon", lon));
  CGP_RETURN_IF_ERROR(require_lat("lat", lat, max_lat(kind_)));
  Xy xy;
  bool ok = false;
  try {
    ok = impl_->projection.forward(LonLat(lon, lat), xy);
  } catch (const std::exception&) {
    ok = false;
  }
  if (!ok || !std::isfinite(bg::get<0>(xy)) || !std::isfinite(bg::get<1>(xy))) {
    return make_error(ErrorCode::out_of_range, "lon",
                      "(lon, lat) = (" + format_number(lon) + ", " + format_number(lat) +
                          ") cannot be projected with the " +
                          std::string(projection_kind_name(kind_)) + " projection");
  }
  return std::array<double, 2>{bg::get<0>(xy), bg::get<1>(xy)};
}

Expected<std::array<double, 2>> LonLatProjection::inverse(double x, double y) const {
  CGP_RETURN_IF_ERROR(require_finite("x", x));
  CGP_RETURN_IF_ERROR(require_finite("y", y));
  LonLat ll;
  bool ok = false;
  try {
    ok = impl_->projection.inverse(Xy(x, y), ll);
  } catch (const std::exception&) {
    ok = false;
  }
  if (!ok || !std::isfinite(bg::get<0>(ll)) || !std::isfinite(bg::get<1>(ll))) {
    return make_error(ErrorCode::out_of_range, "x",
                      "(x, y) = (" + format_number(x) + ", " + format_number(y) +
                          ") is outside the domain of the inverse projection");
  }
  return std::array<double, 2>{bg::get<0>(ll), bg::get<1>(ll)};
}

Expected<std::array<double, 2>> lonlat_centre(std::span<const double> lon,
                                              std::span<const double> lat) {
  if (lon.empty()) return make_error(ErrorCode::invalid_argument, "lon", "lon must not be empty");
  CGP_RETURN_IF_ERROR(require_dimension("lat", lat, lon.size()));
  double lon_lo = 180, lon_hi = -180, lat_lo = 90, lat_hi = -90;
  for (std::size_t i = 0; i < lon.size(); ++i) {
    CGP_RETURN_IF_ERROR(require_lon(indexed_name("lon", i), lon[i]));
    CGP_RETURN_IF_ERROR(require_lat(indexed_name("lat", i), lat[i], 90));
    lon_lo = std::min(lon_lo, lon[i]);
    lon_hi = std::max(lon_hi, lon[i]);
    lat_lo = std::min(lat_lo, lat[i]);
    lat_hi = std::max(lat_hi, lat[i]);
  }
  return std::array<double, 2>{(lon_lo + lon_hi) / 2, (lat_lo + lat_hi) / 2};
}

}  // namespace cgp::geometry
