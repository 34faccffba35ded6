// Why a device's reply did not count as an answer, as one log line. A team writing its own device
// (docs/protocol.md) debugs it from these: before, a malformed answer was counted unanswered with
// nothing in the log, and an unset remaining_budget silently retired the device.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "cgp/v1/cgp.pb.h"
#include "round_table.hpp"

namespace cgp::transport::detail {

struct ReplyCause {
  std::string_view reason;  // groups the line for the rate limit (RefusalLog)
  std::string line;         // "event=reply-... device=... query=... round=..."
};

// Nothing for an answer that counted and leaves the device with budget; otherwise the cause:
// unmatched (no open round asked this device), unusable (wrong number of values, a value not
// finite, an unknown status), rejected or refused by the device, or a device that reports no
// budget left (it is not asked again).
std::optional<ReplyCause> reply_cause(std::string_view device_id, const v1::DeviceReply& reply,
                                      const Delivery& delivery);

}  // namespace cgp::transport::detail
