#include "metrics_http_server.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <thread>
#include <utility>

#include "cgp/common/validate.hpp"

namespace cgp::transport::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct MetricsHttpServer::State {
  Limits limits;
  std::function<std::string()> exposition;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::size_t open = 0;  // connections; touched on the io thread only
  int port = 0;
  std::thread thread;
  void accept();
};

namespace {

// One HTTP connection: read a request (within the timeout), answer, and read the next while the
// client keeps the connection alive. Everything runs on the server's one io thread.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, MetricsHttpServer::State& server)
      : stream_(std::move(socket)), server_(server) {
    ++server_.open;
  }
  ~Connection() { --server_.open; }
  void read() {
    request_ = {};
    stream_.expires_after(server_.limits.request_timeout);
    http::async_read(stream_, buffer_, request_,
                     [self = shared_from_this()](beast::error_code error, std::size_t) {
                       if (!error) self->answer();  // else: timeout, EOF or not HTTP: closed
                     });
  }

 private:
  void answer() {
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

void MetricsHttpServer::State::accept() {
  acceptor.async_accept([this](beast::error_code error, tcp::socket socket) {
    if (error == asio::error::operation_aborted) return;  // stopping
    if (!error) {
      if (open < limits.max_connections)
        std::make_shared<Connection>(std::move(socket), *this)->read();
      // else: closed here (the socket's destructor), before a byte is read
    }
    accept();
  });
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
  beast::error_code error;
  tcp::resolver resolver(state->io);
  const auto endpoints = resolver.resolve(host, std::to_string(port), error);
  if (error || endpoints.empty())
    return make_error(ErrorCode::invalid_argument, "metrics_listen",
                      "metrics_listen: cannot resolve '" + host + "': " + error.message());
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  state->acceptor.open(endpoint.protocol(), error);
  if (!error) state->acceptor.set_option(asio::socket_base::reuse_address(true), error);
  if (!error) state->acceptor.bind(endpoint, error);
  if (!error) state->acceptor.listen(asio::socket_base::max_listen_connections, error);
  if (error)
    return make_error(ErrorCode::unavailable, "metrics_listen",
                      "metrics_listen: cannot listen on " + host + ":" + std::to_string(port) +
                          ": " + error.message());
  state->port = state->acceptor.local_endpoint().port();
  state->accept();
  state->thread = std::thread([io = &state->io] {
    // A handler that throws (out of memory while serialising) drops its connection, not the
    // server: run again until stopped.
    for (;;) {
      try {
        io->run();
        return;
      } catch (const std::exception&) {
      }
    }
  });
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(state)));
}

}  // namespace cgp::transport::detail
