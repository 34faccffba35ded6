// The console's HTTP/1.1 server: Boost.Beast on one Asio thread for the bytes, a bounded pool
// of workers for the handlers. Every request is bounded before it costs more than its bound:
//   - one deadline for the whole request (TLS handshake, head and body): a client that trickles
//     one byte at a time is cut at the deadline, never holds a worker;
//   - the head in `max_header_bytes` (every header line together, not each alone) and the body
//     in `max_body_bytes`, both enforced by Beast's parser while it reads;
//   - `max_connections` open at once: at the cap the connection that has waited longest for its
//     request makes room (idle sockets cannot keep an operator out), and when every connection
//     is being answered the new one is closed;
//   - `workers` handlers at once and `max_queued` waiting; past that a 503, not a queue in memory.
// Framing the console does not take (chunked or compressed bodies, methods other than GET, POST
// and DELETE, a target that is not a path) is refused by name before any body is read. One
// request per connection: a kept-alive console tab would hold a connection between its polls.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::transport::detail {

struct HttpRequest {
  std::string method;                                        // GET, POST or DELETE
  std::string path;                                          // percent-decoded, starts with '/'
  std::vector<std::pair<std::string, std::string>> params;   // the query string, decoded
  std::vector<std::pair<std::string, std::string>> headers;  // as received
  std::string body;
  std::string peer;  // the client's address, for logs
  // The first value of header `name` (any case), or "".
  std::string header(std::string_view name) const;
  // Every value of header `name`, in order.
  std::vector<std::string> header_values(std::string_view name) const;
  // The first value of query parameter `name`.
  std::optional<std::string> param(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  void set_header(std::string name, std::string value);  // replaces one of the same name
  void set_content(std::string content, std::string type);
};

// What a request the server refuses itself looks like (a named JSON error, from the console).
using HttpRefusal = std::function<void(HttpResponse&, const Error&, const char* status, int http)>;
using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;

struct HttpServerSettings {
  std::string host;
  int port = 0;  // 0: any free port
  // PEM chain and key: HTTPS only (TLS 1.2 or later). Empty: plain HTTP.
  std::string tls_certificate_chain, tls_private_key;
  std::size_t max_connections = 64;
  std::size_t max_header_bytes = 16 * 1024;
  std::size_t max_body_bytes = 1 << 20;
  std::chrono::milliseconds request_deadline{5000};  // to receive a whole request
  std::chrono::milliseconds write_deadline{10000};   // to send the answer
  std::size_t workers = 8;
  std::size_t max_queued = 32;
  // Sent with every response, the server's own refusals included.
  std::vector<std::pair<std::string, std::string>> default_headers;
};

class HttpServer {
 public:
  // Errors name "console" (the address, the port taken, the TLS material).
  static Expected<std::unique_ptr<HttpServer>> start(HttpServerSettings settings,
                                                     HttpHandler handler, HttpRefusal refusal);
  // Stops accepting, ends every connection, waits for the handlers that run (a handler that
  // has not started never does).
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  int port() const noexcept;

  struct State;

 private:
  explicit HttpServer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace cgp::transport::detail
