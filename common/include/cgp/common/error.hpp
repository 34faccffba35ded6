// Errors are values across library boundaries (DESIGN §6.7): a small code that a program can
// switch on, the parameter it concerns, and a message a person can act on.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace cgp {

// Stable numeric values: they travel on the wire (cgp.v1.ErrorCode) and through the C ABI.
// Append new codes; never renumber.
enum class ErrorCode : std::int32_t {
  ok = 0,
  not_finite = 1,          // NaN or ±inf
  not_positive = 2,        // must be > 0
  out_of_range = 3,        // outside a documented interval (β ∉ (0, 1), c = 0, δ ≥ 1, ...)
  dimension_mismatch = 4,  // vector of the wrong length
  empty_polygon = 5,       // a ring with fewer than 3 distinct vertices
  degenerate_polygon = 6,  // zero area, spikes, duplicate consecutive vertices, hole outside
  self_intersecting_polygon = 7,
  too_large = 8,           // over a documented size limit (vertices, dimension, bytes)
  malformed_message = 9,   // bytes that do not parse as the expected cgp.v1 message
  missing_field = 10,      // a required field of a cgp.v1 message is absent
  unknown_component = 11,  // a request names a component the device does not have
  invalid_argument = 12,   // any other invalid value (empty id, unknown enum value, ...)
  request_conflict = 13,   // a request id already answered with different content
  ledger_failure = 14,     // the device's ledger cannot be read or written: fail closed
  component_not_set = 15,  // a registered component that has no value yet
  buffer_too_small = 16,   // C ABI: the reply buffer is too small (nothing was charged)
  reply_pruned = 17,       // a request id answered so long ago that its reply was pruned
  ledger_in_use = 18,      // the ledger file is held by another live handle: fail closed
  internal_error = 19,     // an unexpected failure inside the device; nothing was charged
  incomplete_query = 20,   // too few users answered for the estimate to be valid
  // Operational: retry later, or fix something other than the input values.
  unavailable = 21,        // the peer cannot be reached or is overloaded: retry later
  unauthenticated = 22,    // a credential is missing or refused
  deadline_exceeded = 23,  // no answer within the time allowed
  already_exists = 24,     // refusing to replace something that exists (an id, a file)
  unknown_watch = 25,      // a tick names a watch the device does not have
};

inline constexpr ErrorCode kLastErrorCode = ErrorCode::unknown_watch;

// The wire/ABI name of a code, e.g. "not_finite". Unknown values give "unknown_error".
std::string_view error_code_name(ErrorCode code) noexcept;

struct Error {
  ErrorCode code = ErrorCode::ok;
  std::string parameter;  // the offending parameter, e.g. "rho" or "polygon.holes[1]"
  std::string message;    // full sentence naming the parameter and the value received

  // "<code name>: <message>", for logs and command-line tools.
  std::string to_string() const;
};

}  // namespace cgp
