// How a device dials a coordinator, for every device-side client (the device link and the
// load-test swarm): the channel's credentials and the arguments both need.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "cgp/common/wire/limits.hpp"

namespace cgp::protocol {

// Plaintext for an empty root, else TLS checked against the PEM root certificate.
inline std::shared_ptr<grpc::ChannelCredentials> device_channel_credentials(
    const std::string& tls_root_certificate) {
  if (tls_root_certificate.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tls_root_certificate;
  return grpc::SslCredentials(ssl);
}

inline grpc::ChannelArguments device_channel_arguments() {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(static_cast<int>(wire::kMaxMessageBytes));
  // The caller paces redials (100 ms to 5 s: ReconnectPolicy, the swarm); gRPC's own backoff,
  // kept by the process-wide subchannel across calls, must not be slower (its default grows
  // to 2 minutes).
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  // Keepalive pings every minute on a quiet stream: NATs and load balancers drop idle TCP
  // flows silently, and a coordinator that vanished is noticed (ConnectionLimits).
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 60000);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  arguments.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return arguments;
}

}  // namespace cgp::protocol
