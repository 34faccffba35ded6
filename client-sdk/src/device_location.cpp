// Device::set_location_frame and set_location_lonlat: GPS lon/lat projected on the device, in
// the frame the coordinator announced (issue 17; docs/protocol.md "Location frame").
#include <cmath>
#include <numbers>
#include <string>

#include "cgp/client/device.hpp"
#include "cgp/common/validate.hpp"
#include "device_state.hpp"

namespace cgp::client {
namespace {

// How much the frame stretches distances at (lon, lat): its largest local scale factor on the
// sphere (azimuthal equidistant: c/sin c at angular distance c from the origin, 1 along the
// radius; Mercator: 1/cos lat). Privacy in the frame's metres is privacy in ground metres
// only where this is close to 1: a coordinator could otherwise announce a frame centred far
// from the device (c/sin c is 179 at 179°) and read its location with noise that much smaller.
double frame_stretch(const geometry::LocationFrame& frame, double lon, double lat) {
  constexpr double degree = std::numbers::pi / 180;
  if (frame.projection() == geometry::ProjectionKind::spherical_mercator) {
    const auto scale = geometry::mercator_scale_factor(lat);
    return scale ? *scale : HUGE_VAL;  // beyond Mercator's latitudes: refused
  }
  const double lat0 = frame.origin_lat() * degree, lat1 = lat * degree;
  const double dlat = lat1 - lat0, dlon = (lon - frame.origin_lon()) * degree;
  const double h = std::sin(dlat / 2) * std::sin(dlat / 2) +
                   std::cos(lat0) * std::cos(lat1) * std::sin(dlon / 2) * std::sin(dlon / 2);
  const double c = 2 * std::asin(std::min(1.0, std::sqrt(h)));
  return c < 1e-8 ? 1 : c / std::sin(c);
}

// At most 1% (a local frame within ~1,550 km of its origin): the noise a device adds then
// protects ground distances within 2% of what ρ promises.
constexpr double kMaxFrameStretch = 1.01;

}  // namespace

Status Device::set_location_frame(const geometry::LocationFrame& frame) {
  State& s = *state_;
  if (s.frame && *s.frame == frame) return {};
  CGP_ASSIGN_OR_RETURN(auto projector, frame.projector());
  s.projector.emplace(std::move(projector));
  s.frame = frame;
  return {};
}

const std::optional<geometry::LocationFrame>& Device::location_frame() const noexcept {
  return state_->frame;
}

Status Device::set_location_lonlat(std::string_view id, double lon, double lat) {
  State& s = *state_;
  if (!s.frame)
    return make_error(ErrorCode::invalid_argument, "frame",
                      "no location frame: the coordinator announces it in Welcome "
                      "(set_location_frame); until then lon/lat cannot be projected");
  CGP_RETURN_IF_ERROR(require_finite("lon", lon));
  CGP_RETURN_IF_ERROR(require_finite("lat", lat));
  CGP_ASSIGN_OR_RETURN(auto xy, s.projector->forward(lon, lat));
  if (const double stretch = frame_stretch(*s.frame, lon, lat); !(stretch <= kMaxFrameStretch))
    return make_error(ErrorCode::out_of_range, "frame",
                      "frame " + s.frame->to_string() + " stretches distances by " +
                          std::to_string(stretch) +
                          " at this position (more than 1%): its metres are not ground metres "
                          "here, so the device does not answer in them");
  // A component registered before (e.g. through the C ABI, without a unit) keeps its unit.
  auto existing = s.components.find(std::string(id));
  CGP_RETURN_IF_ERROR(
      register_component(id, 2, existing != s.components.end() ? existing->second.unit : "m"));
  CGP_RETURN_IF_ERROR(set_component(id, xy));
  s.components.find(std::string(id))->second.frame = s.frame;
  return {};
}

}  // namespace cgp::client
