#include "cgp/common/geometry/location_frame.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "cgp/common/validate.hpp"

namespace cgp::geometry {
namespace {

Expected<double> parse_degrees(std::string_view text, const char* parameter) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size())
    return make_error(
        ErrorCode::invalid_argument, parameter,
        std::string(parameter) + " must be a number of degrees, got '" + std::string(text) + "'");
  return value;
}

std::string shortest(double value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

}  // namespace

Status require_lonlat(double lon, double lat, std::string_view lon_name,
                      std::string_view lat_name) {
  CGP_RETURN_IF_ERROR(require_finite(lon_name, lon));
  CGP_RETURN_IF_ERROR(require_finite(lat_name, lat));
  if (lon < -180 || lon > 180)
    return make_error(
        ErrorCode::out_of_range, lon_name,
        std::string(lon_name) + " must be in [-180, 180] degrees, got " + shortest(lon));
  if (!(lat > -90 && lat < 90))
    return make_error(
        ErrorCode::out_of_range, lat_name,
        std::string(lat_name) + " must be in (-90, 90) degrees, got " + shortest(lat));
  return {};
}

Expected<LocationFrame> LocationFrame::create(ProjectionKind projection, double origin_lon,
                                              double origin_lat) {
  CGP_RETURN_IF_ERROR(
      require_lonlat(origin_lon, origin_lat, "frame.origin_lon", "frame.origin_lat"));
  if (projection == ProjectionKind::spherical_mercator && origin_lat != 0)
    return make_error(ErrorCode::out_of_range, "frame.origin_lat",
                      "a mercator frame has only a central meridian: frame.origin_lat must be 0, "
                      "got " +
                          shortest(origin_lat));
  return LocationFrame(projection, origin_lon, origin_lat);
}

Expected<LocationFrame> LocationFrame::parse(std::string_view text) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos)
    return make_error(
        ErrorCode::invalid_argument, "frame",
        "frame must be local:LON,LAT or mercator:LON, got '" + std::string(text) + "'");
  CGP_ASSIGN_OR_RETURN(auto projection, parse_projection_kind(text.substr(0, colon)));
  const std::string_view rest = text.substr(colon + 1);
  const auto comma = rest.find(',');
  if (projection == ProjectionKind::spherical_mercator) {
    if (comma != std::string_view::npos)
      return make_error(ErrorCode::invalid_argument, "frame",
                        "a mercator frame takes only its central meridian: mercator:LON, got '" +
                            std::string(text) + "'");
    CGP_ASSIGN_OR_RETURN(double lon, parse_degrees(rest, "frame.origin_lon"));
    return create(projection, lon, 0);
  }
  if (comma == std::string_view::npos)
    return make_error(
        ErrorCode::invalid_argument, "frame",
        "a local frame takes its centre: local:LON,LAT, got '" + std::string(text) + "'");
  CGP_ASSIGN_OR_RETURN(double lon, parse_degrees(rest.substr(0, comma), "frame.origin_lon"));
  CGP_ASSIGN_OR_RETURN(double lat, parse_degrees(rest.substr(comma + 1), "frame.origin_lat"));
  return create(projection, lon, lat);
}

Expected<LonLatProjection> LocationFrame::projector() const {
  return LonLatProjection::create(projection_, origin_lon_, origin_lat_);
}

std::string LocationFrame::to_string() const {
  std::string out(projection_kind_name(projection_));
  out += ':' + shortest(origin_lon_);
  if (projection_ == ProjectionKind::local_equidistant) out += ',' + shortest(origin_lat_);
  return out;
}

}  // namespace cgp::geometry
