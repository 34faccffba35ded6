// What every Analyst API handler does at its door and on its way out, for both services that
// serve the API (the single-process coordinator's and the live tier's round driver): the
// analyst credential checked at the call's headers, and no exception leaving a handler.
#pragma once

#include <grpcpp/grpcpp.h>

#include <exception>
#include <optional>
#include <string>

#include "cgp/common/validate.hpp"
#include "cgp/protocol/status_codec.hpp"
#include "cgp/transport/credentials.hpp"

namespace cgp::transport::detail {

inline constexpr const char* kAnalystCredentialHeader = "cgp-analyst-credential";

// Whether a call carries the analyst credential (always, when none is configured): checked at
// the call's headers, before anything of it is read or held.
inline bool analyst_authorised(const grpc::ServerContextBase& context,
                               const std::optional<CredentialSha256>& credential_sha256) {
  if (!credential_sha256) return true;
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find(kAnalystCredentialHeader);
  return it != metadata.end() &&
         credential_matches({it->second.data(), it->second.size()}, *credential_sha256);
}

inline grpc::Status analyst_unauthenticated(grpc::ServerContextBase* context) {
  return protocol::to_grpc_status(
      context, Error{ErrorCode::unauthenticated, "credential",
                     "credential: the analyst credential is missing or refused"});
}

// No exception leaves a handler: gRPC would answer UNKNOWN with no name. An unexpected
// failure is INTERNAL with the internal_error code, like every other named error.
template <class Body>
grpc::Status guarded(grpc::ServerContextBase* context, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    try {
      return protocol::to_grpc_status(
          context, make_error(ErrorCode::internal_error, "query",
                              std::string("the coordinator failed: ") + e.what()));
    } catch (...) {
    }
  } catch (...) {
  }
  return {grpc::StatusCode::INTERNAL, "query: the coordinator failed"};
}

}  // namespace cgp::transport::detail
