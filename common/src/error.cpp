#include "cgp/common/error.hpp"

namespace cgp {

std::string_view error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::ok:
      return "ok";
    case ErrorCode::not_finite:
      return "not_finite";
    case ErrorCode::not_positive:
      return "not_positive";
    case ErrorCode::out_of_range:
      return "out_of_range";
    case ErrorCode::dimension_mismatch:
      return "dimension_mismatch";
    case ErrorCode::empty_polygon:
      return "empty_polygon";
    case ErrorCode::degenerate_polygon:
      return "degenerate_polygon";
    case ErrorCode::self_intersecting_polygon:
      return "self_intersecting_polygon";
    case ErrorCode::too_large:
      return "too_large";
    case ErrorCode::malformed_message:
      return "malformed_message";
    case ErrorCode::missing_field:
      return "missing_field";
    case ErrorCode::unknown_component:
      return "unknown_component";
    case ErrorCode::invalid_argument:
      return "invalid_argument";
    case ErrorCode::request_conflict:
      return "request_conflict";
    case ErrorCode::ledger_failure:
      return "ledger_failure";
    case ErrorCode::component_not_set:
      return "component_not_set";
    case ErrorCode::buffer_too_small:
      return "buffer_too_small";
    case ErrorCode::reply_pruned:
      return "reply_pruned";
    case ErrorCode::ledger_in_use:
      return "ledger_in_use";
    case ErrorCode::internal_error:
      return "internal_error";
    case ErrorCode::incomplete_query:
      return "incomplete_query";
    case ErrorCode::unavailable:
      return "unavailable";
    case ErrorCode::unauthenticated:
      return "unauthenticated";
    case ErrorCode::deadline_exceeded:
      return "deadline_exceeded";
    case ErrorCode::already_exists:
      return "already_exists";
    case ErrorCode::unknown_watch:
      return "unknown_watch";
  }
  return "unknown_error";
}

std::string Error::to_string() const {
  std::string out(error_code_name(code));
  out += ": ";
  out += message;
  return out;
}

}  // namespace cgp
