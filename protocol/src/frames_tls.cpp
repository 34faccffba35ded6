#include "cgp/protocol/frames_tls.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "cgp/protocol/device_frames.hpp"

namespace cgp::protocol {
namespace {

// ALPN's wire form: a length byte, then the name.
const std::string& alpn_wire() {
  static const std::string wire =
      std::string(1, static_cast<char>(kDeviceFramesAlpn.size())) + std::string(kDeviceFramesAlpn);
  return wire;
}

Error tls_error(const std::string& message) {
  return make_error(ErrorCode::invalid_argument, "tls", "tls: " + message + take_ssl_errors());
}

int select_alpn(SSL*, const unsigned char** out, unsigned char* out_length,
                const unsigned char* offered, unsigned int offered_length, void*) {
  const auto& wire = alpn_wire();
  unsigned char* chosen = nullptr;
  if (SSL_select_next_proto(
          &chosen, out_length, reinterpret_cast<const unsigned char*>(wire.data()),
          static_cast<unsigned>(wire.size()), offered, offered_length) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_ALERT_FATAL;  // no ALPN, or not ours: the handshake fails
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

SslContext base_context(const SSL_METHOD* method) {
  SslContext context(SSL_CTX_new(method));
  if (!context) return context;
  SSL_CTX_set_min_proto_version(context.get(), TLS1_3_VERSION);
  SSL_CTX_set_mode(context.get(), SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                                      SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // One read() per burst instead of one per record header and one per record body.
  SSL_CTX_set_read_ahead(context.get(), 1);
  return context;
}

// The write half of a socket, without SIGPIPE: OpenSSL's socket BIO writes with write(2).
int send_no_signal(BIO* bio, const char* data, int length) {
  BIO_clear_retry_flags(bio);
  const ssize_t sent = ::send(static_cast<int>(BIO_get_fd(bio, nullptr)), data,
                              static_cast<std::size_t>(length), MSG_NOSIGNAL);
  if (sent >= 0) return static_cast<int>(sent);
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) BIO_set_retry_write(bio);
  return -1;
}

long control_no_signal(BIO* bio, int command, long number, void* pointer) {
  switch (command) {
    case BIO_C_SET_FD:
      BIO_set_data(
          bio, reinterpret_cast<void*>(static_cast<std::intptr_t>(*static_cast<int*>(pointer))));
      BIO_set_init(bio, 1);
      return 1;
    case BIO_C_GET_FD:
      if (BIO_get_init(bio) == 0) return -1;
      {
        const auto fd = static_cast<int>(reinterpret_cast<std::intptr_t>(BIO_get_data(bio)));
        if (pointer) *static_cast<int*>(pointer) = fd;
        return fd;
      }
    case BIO_CTRL_FLUSH:
      return 1;  // nothing is buffered here
    default:
      (void)number;
      return 0;
  }
}

BIO_METHOD* no_signal_method() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "cgp send");
    if (!m) return m;
    BIO_meth_set_write(m, send_no_signal);
    BIO_meth_set_ctrl(m, control_no_signal);
    return m;
  }();
  return method;
}

// PEM bytes, for OpenSSL's readers.
using Bio = std::unique_ptr<BIO, decltype(&BIO_free)>;
Bio memory_bio(const std::string& bytes) {
  return Bio(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())), BIO_free);
}

// An error of the TLS material: what OpenSSL queued meanwhile is dropped, not reported.
Error material_error(const std::string& message) {
  ERR_clear_error();
  return make_error(ErrorCode::invalid_argument, "tls", "tls: " + message);
}

}  // namespace

Status check_tls_material(const std::string& chain, const std::string& key) {
  Bio chain_bio = memory_bio(chain), key_bio = memory_bio(key);
  if (!chain_bio || !key_bio) return material_error("out of memory reading the PEM files");
  std::unique_ptr<X509, decltype(&X509_free)> leaf(
      PEM_read_bio_X509(chain_bio.get(), nullptr, nullptr, nullptr), X509_free);
  if (!leaf) return material_error("the certificate chain holds no PEM certificate");
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> private_key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
  if (!private_key) return material_error("the private key is not a PEM private key");
  if (X509_check_private_key(leaf.get(), private_key.get()) != 1)
    return material_error("the private key does not belong to the chain's first certificate");
  ERR_clear_error();
  return {};
}

void tune_frames_socket(int fd, const KeepAlive& keepalive) {
  const int one = 1;
  const auto at_least_one = [](std::chrono::seconds s) {
    return static_cast<int>(std::clamp<std::int64_t>(s.count(), 1, 32767));
  };
  const int idle = at_least_one(keepalive.idle), interval = at_least_one(keepalive.interval),
            probes = std::clamp(keepalive.probes, 1, 127);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

bool attach_socket(SSL* ssl, int fd) {
  BIO_METHOD* method = no_signal_method();
  if (!method) return false;
  BIO* read = BIO_new_socket(fd, BIO_NOCLOSE);
  BIO* write = BIO_new(method);
  if (!read || !write) {
    BIO_free(read);
    BIO_free(write);
    return false;
  }
  BIO_set_fd(write, fd, BIO_NOCLOSE);
  SSL_set_bio(ssl, read, write);  // ssl owns both from here
  return true;
}

std::string take_ssl_errors() {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    std::array<char, 256> buffer{};
    ERR_error_string_n(code, buffer.data(), buffer.size());
    text += text.empty() ? " (" : "; ";
    text += buffer.data();
  }
  if (!text.empty()) text += ")";
  return text;
}

Status use_certificate_chain(SSL_CTX* context, const std::string& certificate_chain,
                             const std::string& private_key) {
  Bio chain = memory_bio(certificate_chain), key_bio = memory_bio(private_key);
  if (!chain || !key_bio) return tls_error("out of memory reading the PEM files");
  std::unique_ptr<X509, decltype(&X509_free)> leaf(
      PEM_read_bio_X509(chain.get(), nullptr, nullptr, nullptr), X509_free);
  if (!leaf || SSL_CTX_use_certificate(context, leaf.get()) != 1)
    return tls_error("the certificate cannot be used");
  while (X509* extra = PEM_read_bio_X509(chain.get(), nullptr, nullptr, nullptr))
    if (SSL_CTX_add0_chain_cert(context, extra) != 1) {
      X509_free(extra);
      return tls_error("a chain certificate cannot be added");
    }
  ERR_clear_error();  // the end of the chain reads as an error
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
  if (!key || SSL_CTX_use_PrivateKey(context, key.get()) != 1)
    return tls_error("the private key cannot be used");
  return {};
}

Expected<SslContext> frames_server_context(const std::string& certificate_chain,
                                           const std::string& private_key) {
  if (certificate_chain.empty() || private_key.empty())
    return make_error(ErrorCode::missing_field, "tls",
                      "tls: the device frames port needs a certificate chain and a private key");
  CGP_RETURN_IF_ERROR(check_tls_material(certificate_chain, private_key));
  SslContext context = base_context(TLS_server_method());
  if (!context) return tls_error("cannot make a context");
  CGP_RETURN_IF_ERROR(use_certificate_chain(context.get(), certificate_chain, private_key));
  // Devices reconnect with a full handshake: no session cache to grow with the fleet.
  SSL_CTX_set_session_cache_mode(context.get(), SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(context.get(), 0);
  SSL_CTX_set_alpn_select_cb(context.get(), select_alpn, nullptr);
  return context;
}

Expected<SslContext> frames_client_context(const std::string& root_certificate) {
  if (root_certificate.empty())
    return make_error(ErrorCode::missing_field, "tls",
                      "tls: the device frames transport needs the coordinator's root certificate");
  SslContext context = base_context(TLS_client_method());
  if (!context) return tls_error("cannot make a context");
  Bio bio = memory_bio(root_certificate);
  X509_STORE* store = SSL_CTX_get_cert_store(context.get());
  int roots = 0;
  while (X509* root = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    const int added = X509_STORE_add_cert(store, root);
    X509_free(root);
    if (added != 1) return tls_error("a root certificate cannot be added");
    ++roots;
  }
  ERR_clear_error();
  if (roots == 0) return tls_error("the root certificate holds no PEM certificate");
  SSL_CTX_set_verify(context.get(), SSL_VERIFY_PEER, nullptr);
  const auto& wire = alpn_wire();
  if (SSL_CTX_set_alpn_protos(context.get(), reinterpret_cast<const unsigned char*>(wire.data()),
                              static_cast<unsigned>(wire.size())) != 0)
    return tls_error("cannot offer ALPN");
  return context;
}

Expected<Ssl> frames_client_session(SSL_CTX* context, int fd, const std::string& host) {
  Ssl ssl(SSL_new(context));
  if (!ssl || !attach_socket(ssl.get(), fd)) return tls_error("cannot make a session");
  in6_addr ip6{};
  in_addr ip4{};
  const bool literal =
      inet_pton(AF_INET, host.c_str(), &ip4) == 1 || inet_pton(AF_INET6, host.c_str(), &ip6) == 1;
  if (literal) {
    // An IP literal is checked against the certificate's IP addresses; no SNI for it (RFC 6066).
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl.get()), host.c_str()) != 1)
      return tls_error("cannot check address " + host);
  } else {
    if (SSL_set_tlsext_host_name(ssl.get(), host.c_str()) != 1 ||
        SSL_set1_host(ssl.get(), host.c_str()) != 1)
      return tls_error("cannot check host " + host);
  }
  SSL_set_connect_state(ssl.get());
  return ssl;
}

bool frames_alpn_agreed(const SSL* ssl) {
  const unsigned char* agreed = nullptr;
  unsigned int length = 0;
  SSL_get0_alpn_selected(ssl, &agreed, &length);
  return agreed && length == kDeviceFramesAlpn.size() &&
         std::memcmp(agreed, kDeviceFramesAlpn.data(), length) == 0;
}

}  // namespace cgp::protocol
