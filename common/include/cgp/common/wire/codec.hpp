// The serialization edge (DESIGN §6.10): cgp.v1 bytes <-> validated domain objects. Protobuf
// appears in no other public header of common.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "cgp/common/device_config.hpp"
#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/region.hpp"
#include "cgp/common/request.hpp"
#include "cgp/common/watch.hpp"
#include "cgp/v1/cgp.pb.h"

namespace cgp::wire {

// Parsing: bytes over kMaxMessageBytes are too_large before any parsing; bytes that do not
// parse are malformed_message. The error names the message type.
Expected<v1::DeviceRequest> parse_device_request(std::span<const std::uint8_t> bytes);
Expected<v1::DeviceReply> parse_device_reply(std::span<const std::uint8_t> bytes);
Expected<v1::DeviceConfig> parse_device_config(std::span<const std::uint8_t> bytes);
Expected<v1::WatchSpec> parse_watch_spec(std::span<const std::uint8_t> bytes);
Expected<v1::DeviceToCoordinator> parse_device_to_coordinator(std::span<const std::uint8_t> bytes);
Expected<v1::CoordinatorToDevice> parse_coordinator_to_device(std::span<const std::uint8_t> bytes);

// Serializes any cgp.v1 message deterministically (same message, same bytes).
std::string serialize(const google::protobuf::MessageLite& message);

// Wire -> domain, validating every field (limits, finiteness, polygon simplicity, ...).
Expected<geometry::Region> region_from_wire(const v1::Region& region);
Expected<DeviceRequest> request_from_wire(const v1::DeviceRequest& request);
// LocationFrame (Welcome, DeviceRequest): PROJECTION_UNSPECIFIED is "no frame"; errors name
// "frame.projection", "frame.origin_lon", "frame.origin_lat".
Expected<std::optional<geometry::LocationFrame>> frame_from_wire(const v1::LocationFrame& frame);
v1::LocationFrame frame_to_wire(const std::optional<geometry::LocationFrame>& frame);
Expected<DeviceConfig> config_from_wire(const v1::DeviceConfig& config);
Expected<WatchSpec> watch_from_wire(const v1::WatchSpec& spec);
// A reply as a device sent it: no validation here (the values are checked where they are
// used, coordinator::record_reply); an unknown status reads as rejected_invalid.
DeviceReply reply_from_wire(const v1::DeviceReply& reply);

// Domain -> wire.
v1::Region region_to_wire(const geometry::Region& region);
v1::DeviceRequest request_to_wire(const DeviceRequest& request);
v1::DeviceConfig config_to_wire(const DeviceConfig& config);
v1::WatchSpec watch_to_wire(const WatchSpec& spec);
// Error messages are cut to kMaxReplyErrorMessage bytes (whole UTF-8 sequences), so that a
// reply's size has a known bound.
inline constexpr std::size_t kMaxReplyErrorMessage = 400;
v1::DeviceReply reply_to_wire(const DeviceReply& reply);

// At most `limit` bytes of `text`, not splitting a UTF-8 sequence (proto3 strings must stay
// valid UTF-8).
std::string cut_utf8(const std::string& text, std::size_t limit);

v1::ErrorCode error_code_to_wire(ErrorCode code) noexcept;
ErrorCode error_code_from_wire(v1::ErrorCode code) noexcept;

}  // namespace cgp::wire
