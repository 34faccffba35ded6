// What the coordinator's gRPC servers share (the device gateway's and the analyst's own port):
// TLS credentials from PEM, and connection limits as gRPC channel arguments.
#pragma once

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <memory>
#include <string>

#include "cgp/common/expected.hpp"
#include "cgp/transport/gateway.hpp"

namespace cgp::transport::detail {

// Both PEM strings empty: plaintext; one without the other: missing_field "tls".
Expected<std::shared_ptr<grpc::ServerCredentials>> server_credentials(
    const std::string& certificate_chain, const std::string& private_key);

// Handshake and idle timeouts, streams per connection, keepalive, and the largest message.
void apply_limits(grpc::ServerBuilder& builder, const ConnectionLimits& limits);

}  // namespace cgp::transport::detail
