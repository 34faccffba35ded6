// Device::set_location_frame and set_location_lonlat: GPS lon/lat projected on the device, in
// the frame the coordinator announced (issue 17; docs/protocol.md "Location frame").
#include "cgp/client/device.hpp"
#include "cgp/common/validate.hpp"
#include "device_state.hpp"

namespace cgp::client {

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
  CGP_RETURN_IF_ERROR(register_component(id, 2, "m"));
  CGP_RETURN_IF_ERROR(set_component(id, xy));
  s.components.find(std::string(id))->second.frame = s.frame;
  return {};
}

}  // namespace cgp::client
