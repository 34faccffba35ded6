// Device::set_location_frame and set_location_lonlat: GPS lon/lat projected on the device into
// the frame the coordinator announced (docs/protocol.md "Location frame"). Every decision here
// is made on public data (the frame, the app's calls), never on the fix: a fix is projected by
// geometry::FrameProjection, which places every valid fix and is Lipschitz in ground metres
// (common/src/geometry/frame_projection.md).
#include <array>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "cgp/client/device.hpp"
#include "cgp/common/validate.hpp"
#include "device_state.hpp"

namespace cgp::client {
namespace {

// Projecting a fix takes a time that depends on it (Vincenty's iterations; the antipode's gate
// skips them): ~0.5 µs median on the reference machine, so a paced device pads each projection
// to this public window. A coordinator could otherwise time a Welcome's handling (or an app's
// new fix holding the device lock) against the fix.
constexpr std::chrono::microseconds kProjectionWindow{50};

}  // namespace

Status Device::set_location_frame(const geometry::LocationFrame& frame) {
  State& s = *state_;
  if (s.frame && *s.frame == frame) return {};
  CGP_ASSIGN_OR_RETURN(auto projection, geometry::FrameProjection::create(frame));
  std::size_t fixes = 0;  // public: how many components the app gives as lon/lat
  for (const auto& [id, component] : s.components) fixes += component.lonlat.has_value();
  const auto paced_until =
      fixes > 0 ? s.pace_from_now(kProjectionWindow * fixes) : PacingClock::Time{};
  // Every fix given as lon/lat follows the frame: projecting a valid fix cannot fail, so no
  // component is left in an older frame (or at an older fix) depending on where the user is.
  std::vector<std::pair<Component*, std::array<double, 2>>> moved;
  for (auto& [id, component] : s.components) {
    if (!component.lonlat) continue;
    const auto [lon, lat] = *component.lonlat;
    CGP_ASSIGN_OR_RETURN(auto xy, projection.project(lon, lat));
    moved.emplace_back(&component, xy);
  }
  for (auto& [component, xy] : moved) {
    component->value.assign(xy.begin(), xy.end());
    component->frame = frame;
  }
  if (fixes > 0) s.pace_until(paced_until);
  s.projection.emplace(std::move(projection));
  s.frame = frame;
  return {};
}

const std::optional<geometry::LocationFrame>& Device::location_frame() const noexcept {
  return state_->frame;
}

Status Device::set_location_lonlat(std::string_view id, double lon, double lat) {
  State& s = *state_;
  CGP_RETURN_IF_ERROR(geometry::require_lonlat(lon, lat));
  if (!s.projection)
    return make_error(ErrorCode::invalid_argument, "frame",
                      "no location frame: the coordinator announces it in Welcome "
                      "(set_location_frame); until then lon/lat cannot be projected");
  const auto paced_until = s.pace_from_now(kProjectionWindow);
  auto xy = s.projection->project(lon, lat);  // fails only for an invalid fix, checked above
  s.pace_until(paced_until);
  if (!xy) return xy.error();
  // A component registered before (e.g. through the C ABI, without a unit) keeps its unit.
  auto existing = s.components.find(std::string(id));
  CGP_RETURN_IF_ERROR(
      register_component(id, 2, existing != s.components.end() ? existing->second.unit : "m"));
  CGP_RETURN_IF_ERROR(set_component(id, *xy));
  Component& component = s.components.find(std::string(id))->second;
  component.frame = s.frame;
  component.lonlat = std::array<double, 2>{lon, lat};
  return {};
}

}  // namespace cgp::client
