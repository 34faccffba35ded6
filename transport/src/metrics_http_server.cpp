#include "metrics_http_server.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "asio_listener.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::transport::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {
class Connection;
}

struct MetricsHttpServer::State {
  Limits limits;
  std::function<std::string()> exposition;
  // Connections, touched on the io thread only; before `io`, which destroys the connections
  // that are left.
  std::set<Connection*> connections;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer retry{io};
  int port = 0;
  std::thread thread;
  void admit(tcp::socket socket);
};

namespace {

// One HTTP connection: read a request (within the timeout), answer, and read the next while the
// client keeps the connection alive. Everything runs on the server's one io thread.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, MetricsHttpServer::State& server)
      : stream_(std::move(socket)), server_(server) {
    server_.connections.insert(this);
  }
  ~Connection() { server_.connections.erase(this); }
  // Since when it waits for a request (none: a request is being answered).
  std::optional<std::chrono::steady_clock::time_point> waiting_since;
  void close() {
    beast::error_code ignored;
    stream_.socket().close(ignored);  // its read ends (operation_aborted), and it goes
  }
  void read() {
    request_ = {};
    waiting_since = std::chrono::steady_clock::now();
    stream_.expires_after(server_.limits.request_timeout);
    http::async_read(stream_, buffer_, request_,
                     [self = shared_from_this()](beast::error_code error, std::size_t) {
                       if (!error) self->answer();  // else: timeout, EOF or not HTTP: closed
                     });
  }

 private:
  void answer() {
    waiting_since.reset();
    response_ = {};
    response_.version(request_.version());
    response_.keep_alive(request_.keep_alive());
    const auto target = request_.target();
    const bool metrics = target == "/metrics" || target.starts_with("/metrics?");
    if (request_.method() != http::verb::get && request_.method() != http::verb::head) {
      response_.result(http::status::method_not_allowed);
      response_.set(http::field::allow, "GET, HEAD");
    } else if (!metrics) {
      response_.result(http::status::not_found);
    } else {
      response_.result(http::status::ok);
      response_.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      if (request_.method() == http::verb::get) response_.body() = server_.exposition();
    }
    response_.prepare_payload();
    stream_.expires_after(server_.limits.request_timeout);
    http::async_write(stream_, response_,
                      [self = shared_from_this()](beast::error_code error, std::size_t) {
                        if (error) return;
                        if (self->response_.keep_alive()) return self->read();
                        beast::error_code ignored;
                        self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                      });
  }
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_{8192};
  http::request<http::empty_body> request_;  // a body is refused by the parser
  http::response<http::string_body> response_;
  MetricsHttpServer::State& server_;
};

}  // namespace

// At the cap, the connection that has waited longest for a request makes room: idle sockets
// (an attacker's, or forgotten keep-alives) cannot keep a scraper out. When every connection is
// busy answering, the new one is closed.
void MetricsHttpServer::State::admit(tcp::socket socket) {
  if (connections.size() >= limits.max_connections) {
    Connection* oldest = longest_waiting(connections);
    if (!oldest) return;  // the socket closes here
    oldest->close();
  }
  std::make_shared<Connection>(std::move(socket), *this)->read();
}

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<State> state) : state_(std::move(state)) {}

MetricsHttpServer::~MetricsHttpServer() {
  asio::post(state_->io, [state = state_.get()] {
    beast::error_code ignored;
    state->acceptor.close(ignored);
    state->io.stop();
  });
  state_->thread.join();
}

int MetricsHttpServer::port() const noexcept {
  return state_->port;
}

Expected<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::start(
    const std::string& host, int port, Limits limits, std::function<std::string()> exposition) {
  auto state = std::make_unique<State>();
  state->limits = limits;
  state->exposition = std::move(exposition);
  CGP_RETURN_IF_ERROR(listen_on(state->acceptor, host, port, "metrics_listen"));
  state->port = state->acceptor.local_endpoint().port();
  accept_each(state->acceptor, state->retry,
              [state = state.get()](tcp::socket socket) { state->admit(std::move(socket)); });
  state->thread = run_io_thread(state->io);
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(state)));
}

}  // namespace cgp::transport::detail
