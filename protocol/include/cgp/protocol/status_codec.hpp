// One mapping between cgp::Error and gRPC status, for the service and its clients,
// so that a caller can tell "retry later" from "fix your input":
//   - the gRPC code is the kind of failure (INVALID_ARGUMENT, UNAVAILABLE, UNAUTHENTICATED,
//     DEADLINE_EXCEEDED, ALREADY_EXISTS, FAILED_PRECONDITION, INTERNAL, NOT_FOUND);
//   - the cgp code travels whole in trailing metadata "cgp-error-code";
//   - the message is "parameter: message" (the parameter once, not twice).
// A status without the metadata (gRPC's own: a peer that cannot be reached, a deadline) maps to
// the operational codes, naming `peer` as the parameter.
#pragma once

#include <grpcpp/grpcpp.h>

#include <map>
#include <string_view>

#include "cgp/common/error.hpp"

namespace cgp::protocol {

inline constexpr const char* kErrorCodeKey = "cgp-error-code";
// Pace steering on a device stream's end (docs/protocol.md §3): come back no sooner than this
// many milliseconds (decimal), as StreamEnd.retry_after_ms on the frames transport.
inline constexpr const char* kRetryAfterKey = "cgp-retry-after-ms";

grpc::StatusCode grpc_code_of(ErrorCode code) noexcept;

// For a handler's return: the status, with the cgp code added to the trailing metadata.
// `as` overrides the gRPC code (NOT_FOUND for a missing result).
grpc::Status to_grpc_status(grpc::ServerContextBase* context, const Error& error);
grpc::Status to_grpc_status(grpc::ServerContextBase* context, const Error& error,
                            grpc::StatusCode as);

// For a client: the named error a call's status stands for.
Error from_grpc_status(const grpc::Status& status,
                       const std::multimap<grpc::string_ref, grpc::string_ref>& trailing,
                       std::string_view peer);

}  // namespace cgp::protocol
