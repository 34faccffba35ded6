#include "cgp/protocol/status_codec.hpp"

#include <charconv>
#include <string>

namespace cgp::protocol {

grpc::StatusCode grpc_code_of(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::ok:
      return grpc::StatusCode::OK;
    case ErrorCode::unavailable:
    case ErrorCode::ledger_in_use:
      return grpc::StatusCode::UNAVAILABLE;
    case ErrorCode::unauthenticated:
      return grpc::StatusCode::UNAUTHENTICATED;
    case ErrorCode::deadline_exceeded:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case ErrorCode::already_exists:
      return grpc::StatusCode::ALREADY_EXISTS;
    case ErrorCode::incomplete_query:
    case ErrorCode::request_conflict:
    case ErrorCode::reply_pruned:
      return grpc::StatusCode::FAILED_PRECONDITION;
    case ErrorCode::ledger_failure:
    case ErrorCode::internal_error:
      return grpc::StatusCode::INTERNAL;
    default:
      return grpc::StatusCode::INVALID_ARGUMENT;
  }
}

grpc::Status to_grpc_status(grpc::ServerContextBase* context, const Error& error,
                            grpc::StatusCode as) {
  context->AddTrailingMetadata(kErrorCodeKey, std::to_string(static_cast<int>(error.code)));
  const std::string prefix = error.parameter + ":";
  const bool named = error.message.rfind(prefix, 0) == 0;
  return {as, named ? error.message : error.parameter + ": " + error.message};
}

grpc::Status to_grpc_status(grpc::ServerContextBase* context, const Error& error) {
  return to_grpc_status(context, error, grpc_code_of(error.code));
}

Error from_grpc_status(const grpc::Status& status,
                       const std::multimap<grpc::string_ref, grpc::string_ref>& trailing,
                       std::string_view peer) {
  const std::string& message = status.error_message();
  if (auto it = trailing.find(kErrorCodeKey); it != trailing.end()) {
    int number = 0;
    const char* first = it->second.data();
    const char* last = first + it->second.size();
    if (std::from_chars(first, last, number).ptr == last && number > 0 &&
        number <= static_cast<int>(kLastErrorCode)) {
      const auto colon = message.find(':');
      return {static_cast<ErrorCode>(number),
              colon == std::string::npos ? std::string(peer) : message.substr(0, colon), message};
    }
  }
  const std::string where(peer);
  switch (status.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
      return {ErrorCode::unauthenticated, "credential", "credential: refused by the " + where};
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return {ErrorCode::deadline_exceeded, where, where + ": no answer in time (" + message + ")"};
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::ABORTED:
      return {ErrorCode::unavailable, where, where + ": unavailable (" + message + ")"};
    case grpc::StatusCode::NOT_FOUND:
      return {ErrorCode::invalid_argument, "query_id", message};
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::FAILED_PRECONDITION: {
      const auto colon = message.find(':');
      return {ErrorCode::invalid_argument,
              colon == std::string::npos ? where : message.substr(0, colon), message};
    }
    default:
      return {ErrorCode::internal_error, where, where + ": " + message};
  }
}

}  // namespace cgp::protocol
