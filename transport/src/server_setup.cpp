#include "server_setup.hpp"

#include <grpcpp/grpcpp.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "cgp/common/validate.hpp"
#include "cgp/common/wire/limits.hpp"

namespace cgp::transport::detail {
namespace {

Error tls_error(const std::string& message) {
  ERR_clear_error();  // nothing of this check is left for gRPC's own use of OpenSSL
  return make_error(ErrorCode::invalid_argument, "tls", "tls: " + message);
}

// gRPC takes any bytes as PEM and fails only at the first handshake, so a coordinator started
// on garbage said tls=on and every client hung. Checked here, with the
// OpenSSL gRPC links against: a certificate, a private key, and that they belong together.
Status check_tls_material(const std::string& chain, const std::string& key) {
  std::unique_ptr<BIO, decltype(&BIO_free)> chain_bio(
      BIO_new_mem_buf(chain.data(), static_cast<int>(chain.size())), BIO_free);
  std::unique_ptr<BIO, decltype(&BIO_free)> key_bio(
      BIO_new_mem_buf(key.data(), static_cast<int>(key.size())), BIO_free);
  if (!chain_bio || !key_bio) return tls_error("out of memory reading the PEM files");
  std::unique_ptr<X509, decltype(&X509_free)> leaf(
      PEM_read_bio_X509(chain_bio.get(), nullptr, nullptr, nullptr), X509_free);
  if (!leaf) return tls_error("the certificate chain holds no PEM certificate");
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> private_key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
  if (!private_key) return tls_error("the private key is not a PEM private key");
  if (X509_check_private_key(leaf.get(), private_key.get()) != 1)
    return tls_error("the private key does not belong to the chain's first certificate");
  ERR_clear_error();
  return {};
}

}  // namespace

Expected<std::shared_ptr<grpc::ServerCredentials>> server_credentials(
    const std::string& certificate_chain, const std::string& private_key) {
  if (certificate_chain.empty() != private_key.empty())
    return make_error(ErrorCode::missing_field, "tls",
                      "TLS needs both a certificate chain and a private key");
  if (certificate_chain.empty()) return grpc::InsecureServerCredentials();
  CGP_RETURN_IF_ERROR(check_tls_material(certificate_chain, private_key));
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
