// TLS for the lean device transport (device_frames.hpp), with the OpenSSL gRPC links against:
// TLS 1.3 only, ALPN "cgp-frames/1" required both ways, record buffers released while a
// connection is idle (SSL_MODE_RELEASE_BUFFERS: an idle device holds no 34 KB of buffers).
#pragma once

#include <openssl/ssl.h>

#include <chrono>
#include <memory>
#include <string>

#include "cgp/common/expected.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::protocol {

struct SslContextFree {
  void operator()(SSL_CTX* context) const noexcept { SSL_CTX_free(context); }
};
using SslContext = std::unique_ptr<SSL_CTX, SslContextFree>;
struct SslFree {
  void operator()(SSL* ssl) const noexcept { SSL_free(ssl); }
};
using Ssl = std::unique_ptr<SSL, SslFree>;

// A PEM certificate chain and private key that belong together, or an error naming "tls" that
// says what is wrong: checked at start for both device ports (gRPC takes any bytes as PEM and
// fails only at the first handshake).
Status check_tls_material(const std::string& chain, const std::string& key);
// Puts a PEM certificate chain (leaf first) and its private key on a server context; an error
// naming "tls" says which part cannot be used. The device frames port and the console use it.
Status use_certificate_chain(SSL_CTX* context, const std::string& certificate_chain,
                             const std::string& private_key);
// The coordinator's: PEM chain and key (checked to belong together: an error naming "tls").
// A client that offers no ALPN or another protocol fails its handshake.
Expected<SslContext> frames_server_context(const std::string& certificate_chain,
                                           const std::string& private_key);
// A device's: the server must present a chain that `root_certificate` (PEM) signs, for the
// host it was dialled by (`SSL_set1_host`/IP check: frames_client_session).
Expected<SslContext> frames_client_context(const std::string& root_certificate);
// A client session on connected socket `fd` for `host` (a name or an IP literal), with the
// server's name sent (SNI) and checked against its certificate.
Expected<Ssl> frames_client_session(SSL_CTX* context, int fd, const std::string& host);
// Puts `ssl` on connected socket `fd` (not owned): reads as OpenSSL's socket BIO does, writes
// with send(MSG_NOSIGNAL), so that a peer that has gone makes a write fail with EPIPE instead
// of raising SIGPIPE, which would end the process (a library must not change its signal
// handling). Use it instead of SSL_set_fd. False: out of memory.
bool attach_socket(SSL* ssl, int fd);
// A frames connection's socket: no Nagle delay (a request and its reply are small and go one by
// one) and keepalive by the kernel (no timer of ours per device: NATs keep the idle flow, a
// vanished peer is noticed), a probe after `idle` of silence, then `probes` of them `interval`
// apart. The device's side uses the defaults.
struct KeepAlive {
  std::chrono::seconds idle{60}, interval{5};
  int probes = 4;
};
void tune_frames_socket(int fd, const KeepAlive& keepalive = {});
// After the handshake: did the peer agree to "cgp-frames/1"?
bool frames_alpn_agreed(const SSL* ssl);
// The text of OpenSSL's error queue (emptied), for a message.
std::string take_ssl_errors();

}  // namespace cgp::protocol
