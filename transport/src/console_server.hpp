// The console (cgp-coordinator serve --console HOST:PORT): an HTTP API over the same query desk
// as the Analyst gRPC API, and the static page that uses it (docs/console.md). Off by default,
// on a port of its own. HTTP is Boost.Beast behind console_http.hpp (which bounds every request:
// one deadline, head and body sizes, connections, handlers); this file holds what the console
// adds: the routes, the analyst credential (a bearer token, or a session cookie with a CSRF
// token), the page's files, and every error as a named JSON error, mapped from the same error
// codes as the gRPC API.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/location_frame.hpp"
#include "cgp/transport/credentials.hpp"

namespace cgp::transport {
struct QueryDesk;
namespace detail {

struct ConsoleSettings {
  std::string address;     // HOST:PORT (port 0: any free one)
  std::string assets_dir;  // the page's files; empty: the API only
  // PEM chain and key: HTTPS (and the session cookie is Secure). Empty: plain HTTP.
  std::string tls_certificate_chain, tls_private_key;
  // The analyst credential's SHA-256; unset: requests are not checked (loopback tests only).
  std::optional<CredentialSha256> credential_sha256;
  // A tile server for the page's background ("https://host/{z}/{x}/{y}.png"), drawn around
  // `frame`'s origin (devices' local frame, which the page needs to place tiles); its origin is
  // the one image source the page may load besides itself. Empty: the offline map only.
  std::string tiles_url;
  std::optional<geometry::LocationFrame> frame;
  std::size_t max_body_bytes = 1 << 20;  // a request body over it is 413
  std::size_t threads = 8;               // requests served at once
  std::function<void(const std::string&)> log;
};

// The scheme, host and port of a tile URL template: "https://a.example.org/{z}/{x}/{y}.png" →
// "https://a.example.org". Errors name "console_tiles": not http(s), no {z}/{x}/{y}, or a
// character that could end a Content-Security-Policy source (space, quote, comma, semicolon).
Expected<std::string> tile_origin(const std::string& url);

class ConsoleServer {
 public:
  // Errors name "console" (the address, the assets folder, TLS material, the port taken).
  static Expected<std::unique_ptr<ConsoleServer>> start(QueryDesk& desk, ConsoleSettings settings);
  ~ConsoleServer();  // stops serving; returns when no request runs
  ConsoleServer(const ConsoleServer&) = delete;
  ConsoleServer& operator=(const ConsoleServer&) = delete;
  int port() const noexcept;

  struct State;

 private:
  explicit ConsoleServer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace detail
}  // namespace cgp::transport
