#include "console_http.hpp"

#include <openssl/ssl.h>

#include <algorithm>
#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "asio_listener.hpp"
#include "cgp/protocol/frames_tls.hpp"

namespace cgp::transport::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// Handlers run here: `workers` threads and at most `max_queued` jobs waiting. A stop drops the
// jobs that have not started and waits for those that run.
class BoundedWorkers {
 public:
  BoundedWorkers(std::size_t workers, std::size_t max_queued) : max_queued_(max_queued) {
    for (std::size_t i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
  }
  ~BoundedWorkers() { stop(); }
  // False (and `job` not taken) when the queue is full or the pool stops.
  bool submit(std::function<void()>& job) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_ || jobs_.size() >= max_queued_) return false;
      jobs_.push_back(std::move(job));
    }
    ready_.notify_one();
    return true;
  }
  void stop() {
    std::deque<std::function<void()>> dropped;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      dropped.swap(jobs_);
    }
    ready_.notify_all();
    for (auto& thread : threads_)
      if (thread.joinable()) thread.join();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      try {
        job();
      } catch (...) {  // out of memory while answering: that connection is dropped, not the pool
      }
    }
  }
  const std::size_t max_queued_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  // Since when it waits for its request or, answered, for the client to close (none: its
  // request is being answered). Only such connections are closed to make room.
  std::optional<std::chrono::steady_clock::time_point> waiting_since;
  std::string address;  // the client's, or "" when the socket could not say
  virtual void close() = 0;
};

// The connection to close at the cap: a waiting one of the address that holds the most
// connections, the longest waiting of those. A flood from one address then closes its own
// connections, not another client's request in progress; among one address's connections the
// longest waiting goes first.
ConnectionBase* connection_to_close(const std::set<ConnectionBase*>& connections) {
  std::map<std::string_view, std::size_t> held;
  for (const auto* c : connections) ++held[c->address];
  ConnectionBase* chosen = nullptr;
  std::size_t chosen_held = 0;
  for (auto* c : connections) {
    if (!c->waiting_since) continue;
    const std::size_t n = held[c->address];
    if (!chosen || n > chosen_held ||
        (n == chosen_held && *c->waiting_since < *chosen->waiting_since)) {
      chosen = c;
      chosen_held = n;
    }
  }
  return chosen;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "%41b+c" -> "Ab+c" (in paths) or "Ab c" (in query strings, `plus_is_space`); nullopt when an
// escape is not two hex digits or the result holds a NUL.
std::optional<std::string> percent_decode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) return std::nullopt;
      const int high = hex_value(text[i + 1]), low = hex_value(text[i + 2]);
      if (high < 0 || low < 0) return std::nullopt;
      c = static_cast<char>(high * 16 + low);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      c = ' ';
    }
    if (c == '\0') return std::nullopt;
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (same_name(key, name)) return value;
  return {};
}
std::vector<std::string> HttpRequest::header_values(std::string_view name) const {
  std::vector<std::string> values;
  for (const auto& [key, value] : headers)
    if (same_name(key, name)) values.push_back(value);
  return values;
}
std::optional<std::string> HttpRequest::param(std::string_view name) const {
  for (const auto& [key, value] : params)
    if (key == name) return value;
  return std::nullopt;
}

void HttpResponse::set_header(std::string name, std::string value) {
  for (auto& header : headers)
    if (same_name(header.first, name)) {
      header.second = std::move(value);
      return;
    }
  headers.emplace_back(std::move(name), std::move(value));
}
void HttpResponse::set_content(std::string content, std::string type) {
  body = std::move(content);
  set_header("Content-Type", std::move(type));
}

struct HttpServer::State {
  HttpServerSettings settings;
  HttpHandler handler;
  HttpRefusal refusal;
  std::optional<asio::ssl::context> tls;  // before the connections that use it
  // Touched on the io thread only; before `io`, whose destruction ends the connections left.
  std::set<ConnectionBase*> connections;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer retry{io};
  int port = 0;
  std::thread thread;
  std::unique_ptr<BoundedWorkers> workers;

  void admit(tcp::socket socket);
};

namespace {

// A request the server refuses itself: the named error, the status and the default headers.
HttpResponse refused(const HttpServer::State& server, const Error& error, const char* status,
                     int http) {
  HttpResponse response;
  response.headers = server.settings.default_headers;
  server.refusal(response, error, status, http);
  return response;
}

// What the console does not take in a request's head: a body in chunks or compressed (the
// body's bound must be known before it is read), another method, a target that is not a path.
std::optional<std::pair<Error, int>> head_refusal(const http::request_parser<http::string_body>& p,
                                                  std::size_t max_body_bytes) {
  const auto& head = p.get();
  if (head.method() != http::verb::get && head.method() != http::verb::post &&
      head.method() != http::verb::delete_)
    return std::pair{Error{ErrorCode::invalid_argument, "method",
                           "method: the console takes GET, POST and DELETE"},
                     405};
  if (head.find(http::field::transfer_encoding) != head.end())
    return std::pair{Error{ErrorCode::invalid_argument, "transfer_encoding",
                           "transfer_encoding: send the body with a Content-Length, not in chunks"},
                     400};
  const auto encoding = head[http::field::content_encoding];
  if (!encoding.empty() && !beast::iequals(encoding, "identity"))
    return std::pair{Error{ErrorCode::invalid_argument, "content_encoding",
                           "content_encoding: the body must not be compressed"},
                     400};
  if (p.content_length() && *p.content_length() > max_body_bytes)
    return std::pair{Error{ErrorCode::too_large, "body", "body: larger than the console accepts"},
                     413};
  if (head.target().empty() || head.target().front() != '/')
    return std::pair{Error{ErrorCode::invalid_argument, "path", "path: must start with '/'"}, 400};
  return std::nullopt;
}

// The request as handlers see it, or why its target cannot be read.
Expected<HttpRequest> to_request(const http::request<http::string_body>& raw) {
  HttpRequest request;
  request.method = std::string(raw.method_string());
  const std::string_view target(raw.target().data(), raw.target().size());
  const auto question = target.find('?');
  auto path = percent_decode(target.substr(0, question), false);
  if (!path)
    return make_error(ErrorCode::invalid_argument, "path",
                      "path: a bad percent escape, or a NUL byte");
  request.path = std::move(*path);
  if (question != std::string_view::npos) {
    std::string_view query = target.substr(question + 1);
    while (!query.empty()) {
      const auto end = query.find('&');
      const std::string_view pair = query.substr(0, end);
      const auto equals = pair.find('=');
      auto key = percent_decode(pair.substr(0, equals), true);
      auto value = percent_decode(
          equals == std::string_view::npos ? std::string_view{} : pair.substr(equals + 1), true);
      if (!key || !value)
        return make_error(ErrorCode::invalid_argument, "query",
                          "query: a bad percent escape, or a NUL byte");
      if (!key->empty()) request.params.emplace_back(std::move(*key), std::move(*value));
      if (end == std::string_view::npos) break;
      query.remove_prefix(end + 1);
    }
  }
  for (const auto& field : raw)
    request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  request.body = raw.body();
  return request;
}

// One connection, one request: read it within the deadline, answer it on a worker, send the
// answer, close. Its reads and writes run on the server's io thread.
template <class Stream>
class Connection final : public ConnectionBase,
                         public std::enable_shared_from_this<Connection<Stream>> {
 public:
  template <class... Args>
  Connection(HttpServer::State& server, Args&&... args)
      : stream_(std::forward<Args>(args)...),
        server_(server),
        buffer_(server.settings.max_header_bytes + 4096) {
    server_.connections.insert(this);
    waiting_since = std::chrono::steady_clock::now();
    beast::error_code no_peer;
    const auto peer = lowest().socket().remote_endpoint(no_peer);
    if (!no_peer) address = peer.address().to_string();
  }
  ~Connection() override { server_.connections.erase(this); }

  void start() {
    lowest().expires_after(server_.settings.request_deadline);  // the whole request's deadline
    parser_.header_limit(static_cast<std::uint32_t>(server_.settings.max_header_bytes));
    parser_.body_limit(server_.settings.max_body_bytes);
    if constexpr (kTls) {
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code error) {
                                if (!error) self->read_head();
                              });
    } else {
      read_head();
    }
  }
  void close() override {
    beast::error_code ignored;
    lowest().socket().close(ignored);  // pending operations end (operation_aborted)
  }

 private:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;
  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }

  void read_head() {
    http::async_read_header(stream_, buffer_, parser_,
                            [self = this->shared_from_this()](
                                beast::error_code error, std::size_t) { self->on_head(error); });
  }
  void on_head(beast::error_code error) {
    if (error) return on_read_error(error);
    if (auto refusal = head_refusal(parser_, server_.settings.max_body_bytes)) {
      const char* status = refusal->second == 413 ? "RESOURCE_EXHAUSTED" : "INVALID_ARGUMENT";
      HttpResponse response = refused(server_, refusal->first, status, refusal->second);
      if (refusal->second == 405) response.set_header("Allow", "GET, POST, DELETE");
      return send(std::move(response));
    }
    // A client that waits for leave to send its body gets it (the head passed every check).
    if (beast::iequals(parser_.get()[http::field::expect], "100-continue")) {
      continue_ = {http::status::continue_, 11};
      return http::async_write(
          stream_, continue_,
          [self = this->shared_from_this()](beast::error_code written, std::size_t) {
            if (!written) self->read_body();
          });
    }
    read_body();
  }
  void read_body() {
    http::async_read(stream_, buffer_, parser_,
                     [self = this->shared_from_this()](beast::error_code read, std::size_t) {
                       if (read) return self->on_read_error(read);
                       self->dispatch();
                     });
  }
  // A request that cannot be read: too big or not HTTP gets its named error; a deadline, a
  // client gone or a stop ends the connection.
  void on_read_error(beast::error_code error) {
    // The buffer holds a whole head and a little more: past it, the head is over its bound.
    if (error == http::error::header_limit || error == http::error::buffer_overflow)
      return send(refused(server_,
                          Error{ErrorCode::too_large, "headers",
                                "headers: the request's head is larger than the console accepts"},
                          "RESOURCE_EXHAUSTED", 431));
    if (error == http::error::body_limit)
      return send(refused(
          server_, Error{ErrorCode::too_large, "body", "body: larger than the console accepts"},
          "RESOURCE_EXHAUSTED", 413));
    if (error.category() == beast::error_code(http::error::end_of_stream).category() &&
        error != http::error::end_of_stream && error != http::error::partial_message)
      return send(refused(server_,
                          Error{ErrorCode::malformed_message, "request",
                                "request: not an HTTP request the console can read"},
                          "INVALID_ARGUMENT", 400));
  }

  void dispatch() {
    waiting_since.reset();
    lowest().expires_never();  // the answer may take as long as its query
    auto request = to_request(parser_.get());
    if (!request) return send(refused(server_, request.error(), "INVALID_ARGUMENT", 400));
    request->peer = address;
    std::function<void()> job = [self = this->shared_from_this(),
                                 request = std::move(*request)]() mutable {
      HttpServer::State& server = self->server_;
      HttpResponse response;
      response.headers = server.settings.default_headers;
      try {
        server.handler(request, response);
      } catch (...) {
        // Still answered, and still handed back below: the connection must not end here.
        response = HttpResponse{500, server.settings.default_headers, {}};
        try {
          server.refusal(response,
                         Error{ErrorCode::internal_error, "console", "console: unexpected failure"},
                         "INTERNAL", 500);
        } catch (...) {
        }
      }
      // The worker keeps no reference once the answer is posted: the connection must end on
      // the io thread (its destructor leaves `connections`, which only that thread touches),
      // and the io thread may finish with it before this job is destroyed.
      asio::post(server.io, [self = std::move(self), response = std::move(response)]() mutable {
        self->send(std::move(response));
      });
    };
    if (!server_.workers->submit(job)) {
      HttpResponse busy = refused(server_,
                                  Error{ErrorCode::unavailable, "console",
                                        "console: busy with other requests; retry in a moment"},
                                  "UNAVAILABLE", 503);
      busy.set_header("Retry-After", "1");
      send(std::move(busy));
    }
  }

  void send(HttpResponse response) {
    waiting_since.reset();
    response_ = {};
    response_.version(11);
    response_.result(static_cast<unsigned>(response.status));
    for (auto& [name, value] : response.headers) response_.set(name, value);
    response_.body() = std::move(response.body);
    response_.keep_alive(false);
    response_.prepare_payload();
    lowest().expires_after(server_.settings.write_deadline);
    http::async_write(stream_, response_,
                      [self = this->shared_from_this()](beast::error_code error, std::size_t) {
                        if (!error) self->finish();
                      });
  }
  // Ends the connection politely, within the write deadline: TLS says close_notify; TCP sends
  // its FIN and reads what the client still sends (closing with unread bytes would reset the
  // connection, and the client could lose the answer).
  void finish() {
    // Answered: nothing is owed to it any more, so at the cap it may make room like a
    // connection that has not sent its request (a client that never closes holds nothing).
    waiting_since = std::chrono::steady_clock::now();
    if constexpr (kTls) {
      stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) {});
    } else {
      beast::error_code ignored;
      lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
      drain();
    }
  }
  void drain() {
    lowest().async_read_some(asio::buffer(scratch_), [self = this->shared_from_this()](
                                                         beast::error_code error, std::size_t) {
      if (!error) self->drain();
    });
  }

  Stream stream_;
  HttpServer::State& server_;
  beast::flat_buffer buffer_;  // bounded in the constructor: a head, and a little more
  http::request_parser<http::string_body> parser_;
  http::response<http::string_body> response_;
  http::response<http::empty_body> continue_;
  std::array<char, 4096> scratch_{};
};

}  // namespace

// At the cap, the connection that has waited longest for its request makes room; when every
// connection is being answered, the new one is closed.
void HttpServer::State::admit(tcp::socket socket) {
  if (connections.size() >= settings.max_connections) {
    ConnectionBase* oldest = connection_to_close(connections);
    if (!oldest) return;  // the socket closes here
    oldest->close();
    connections.erase(oldest);  // its handlers still run (aborted), and find it gone
  }
  if (tls)
    std::make_shared<Connection<beast::ssl_stream<beast::tcp_stream>>>(*this, std::move(socket),
                                                                       *tls)
        ->start();
  else
    std::make_shared<Connection<beast::tcp_stream>>(*this, std::move(socket))->start();
}

HttpServer::HttpServer(std::unique_ptr<State> state) : state_(std::move(state)) {}

HttpServer::~HttpServer() {
  asio::post(state_->io, [state = state_.get()] {
    beast::error_code ignored;
    state->acceptor.close(ignored);
    for (auto* connection : state->connections) connection->close();
    state->io.stop();
  });
  state_->thread.join();
  state_->workers->stop();  // handlers that run finish; their answers go nowhere
}

int HttpServer::port() const noexcept {
  return state_->port;
}

Expected<std::unique_ptr<HttpServer>> HttpServer::start(HttpServerSettings settings,
                                                        HttpHandler handler, HttpRefusal refusal) {
  if (settings.workers == 0 || settings.max_connections == 0 || settings.max_body_bytes == 0 ||
      settings.max_header_bytes == 0)
    return make_error(ErrorCode::not_positive, "console",
                      "console: workers, connections and request bounds must be > 0");
  auto state = std::make_unique<State>();
  state->settings = std::move(settings);
  state->handler = std::move(handler);
  state->refusal = std::move(refusal);
  auto& s = state->settings;
  if (!s.tls_certificate_chain.empty()) {
    CGP_RETURN_IF_ERROR(protocol::check_tls_material(s.tls_certificate_chain, s.tls_private_key));
    state->tls.emplace(asio::ssl::context::tls_server);
    SSL_CTX* context = state->tls->native_handle();
    SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
    CGP_RETURN_IF_ERROR(
        protocol::use_certificate_chain(context, s.tls_certificate_chain, s.tls_private_key));
  }
  CGP_RETURN_IF_ERROR(listen_on(state->acceptor, s.host, s.port, "console"));
  state->port = state->acceptor.local_endpoint().port();
  state->workers = std::make_unique<BoundedWorkers>(s.workers, s.max_queued);
  accept_each(state->acceptor, state->retry,
              [state = state.get()](tcp::socket socket) { state->admit(std::move(socket)); });
  state->thread = run_io_thread(state->io);
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(state)));
}

}  // namespace cgp::transport::detail
