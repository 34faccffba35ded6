// The domain model of what a coordinator asks a device, independent of the wire format.
// Validated objects: build them with DeviceRequest::create or wire::request_from_wire.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/location_frame.hpp"
#include "cgp/common/geometry/region.hpp"

namespace cgp {

// The 1-Lipschitz statistics a device can privatize. K (the Lipschitz constant) is a property
// of the kind, known on the device (lipschitz_constant), never read from a request.
enum class StatisticKind {
  location,                   // φ(x) = x; output dimension d
  distance_to_point,          // φ(x) = ‖x − p‖; output dimension 1
  signed_distance_to_region,  // φ(x) = Proj_Γ(x); output dimension 1
};

std::string_view statistic_kind_name(StatisticKind kind) noexcept;
// K for each kind: 1 for all three (identity, len_p, Proj_Γ by Lemma 6.3).
double lipschitz_constant(StatisticKind kind) noexcept;

struct RequestId {
  std::string query_id;     // non-empty, ≤ 128 bytes
  std::uint32_t round = 0;  // ≥ 1
  friend bool operator==(const RequestId&, const RequestId&) = default;
};

class DeviceRequest {
 public:
  static Expected<DeviceRequest> location(RequestId id, std::string component_id, double rho);
  static Expected<DeviceRequest> distance_to_point(RequestId id, std::string component_id,
                                                   std::vector<double> point, double rho);
  static Expected<DeviceRequest> signed_distance_to_region(RequestId id, std::string component_id,
                                                           geometry::Region region, double rho);

  const RequestId& id() const noexcept { return id_; }
  const std::string& component_id() const noexcept { return component_id_; }
  StatisticKind statistic() const noexcept { return statistic_; }
  double rho() const noexcept { return rho_; }
  // distance_to_point only.
  const std::vector<double>& point() const noexcept { return point_; }
  // signed_distance_to_region only.
  const std::optional<geometry::Region>& region() const noexcept { return region_; }
  // The coordinator's location frame, stamped on the request (none: no frame announced).
  const std::optional<geometry::LocationFrame>& frame() const noexcept { return frame_; }
  void set_frame(std::optional<geometry::LocationFrame> frame) { frame_ = std::move(frame); }

  // The dimension the component must have for this request, or 0 for "any" (location).
  std::size_t required_dimension() const noexcept;

 private:
  static Status validate_common(const RequestId& id, const std::string& component_id, double rho);
  RequestId id_;
  std::string component_id_;
  StatisticKind statistic_ = StatisticKind::location;
  double rho_ = 0;
  std::vector<double> point_;
  std::optional<geometry::Region> region_;
  std::optional<geometry::LocationFrame> frame_;
};

// A device's answer to one request, in the domain (cgp.v1.DeviceReply on the wire): the type
// the device produces and every fleet reads (coordinator::record_reply), with one codec
// (wire::reply_to_wire / reply_from_wire).
enum class ReplyStatus { answered, refused_budget, rejected_invalid };

struct DeviceReply {
  RequestId id;
  ReplyStatus status = ReplyStatus::rejected_invalid;
  Error error;                  // with rejected_invalid
  std::vector<double> values;   // with answered: φ(x) + noise
  double charged_rho = 0;       // what this reply cost (0 unless answered)
  double remaining_budget = 0;  // in ρ units, after this reply
};

}  // namespace cgp
