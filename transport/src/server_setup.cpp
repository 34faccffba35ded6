#include "server_setup.hpp"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "cgp/common/validate.hpp"
#include "cgp/common/wire/limits.hpp"
#include "cgp/protocol/frames_tls.hpp"

namespace cgp::transport::detail {
namespace {}  // namespace

Expected<std::shared_ptr<grpc::ServerCredentials>> server_credentials(
    const std::string& certificate_chain, const std::string& private_key) {
  if (certificate_chain.empty() != private_key.empty())
    return make_error(ErrorCode::missing_field, "tls",
                      "TLS needs both a certificate chain and a private key");
  if (certificate_chain.empty()) return grpc::InsecureServerCredentials();
  CGP_RETURN_IF_ERROR(protocol::check_tls_material(certificate_chain, private_key));
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({private_key, certificate_chain});
  return grpc::SslServerCredentials(ssl);
}

void apply_limits(grpc::ServerBuilder& builder, const ConnectionLimits& limits) {
  auto to_int = [](std::chrono::milliseconds ms) {
    return static_cast<int>(std::min<std::int64_t>(ms.count(), INT32_MAX));
  };
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             to_int(limits.handshake_timeout));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, to_int(limits.idle_timeout));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(limits.max_streams_per_connection));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, to_int(limits.keepalive_time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, to_int(limits.keepalive_timeout));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Clients (cgp's device and analyst) ping every keepalive_time: allow that and a margin, so
  // that their pings are not taken as abuse (GOAWAY "too_many_pings").
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      to_int(std::min(limits.keepalive_time / 2, std::chrono::milliseconds(10000))));
  // Oversized messages are refused by gRPC before they are parsed.
  builder.SetMaxReceiveMessageSize(static_cast<int>(wire::kMaxMessageBytes));
}

}  // namespace cgp::transport::detail
