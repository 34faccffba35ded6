#include "asio_listener.hpp"

#include <boost/beast/core/error.hpp>
#include <memory>

#include "cgp/common/validate.hpp"

namespace cgp::transport::detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::beast::error_code;

Status listen_on(tcp::acceptor& acceptor, const std::string& host, int port,
                 std::string_view parameter) {
  const std::string name(parameter);
  error_code error;
  tcp::resolver resolver(acceptor.get_executor());
  const auto endpoints = resolver.resolve(host, std::to_string(port), error);
  if (error || endpoints.empty())
    return make_error(ErrorCode::invalid_argument, name,
                      name + ": cannot resolve '" + host + "': " + error.message());
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  acceptor.open(endpoint.protocol(), error);
  if (!error) acceptor.set_option(asio::socket_base::reuse_address(true), error);
  if (!error) acceptor.bind(endpoint, error);
  if (!error) acceptor.listen(asio::socket_base::max_listen_connections, error);
  if (error)
    return make_error(ErrorCode::unavailable, name,
                      name + ": cannot listen on " + host + ":" + std::to_string(port) +
                          " (in use, or not an address of this machine): " + error.message());
  return {};
}

namespace {
void accept_next(tcp::acceptor& acceptor, asio::steady_timer& retry,
                 std::shared_ptr<std::function<void(tcp::socket)>> admit) {
  acceptor.async_accept([&acceptor, &retry, admit](error_code error, tcp::socket socket) {
    if (error == asio::error::operation_aborted) return;  // stopping
    if (error) {
      retry.expires_after(std::chrono::milliseconds(50));
      retry.async_wait([&acceptor, &retry, admit](error_code waited) {
        if (!waited) accept_next(acceptor, retry, admit);
      });
      return;
    }
    accept_next(acceptor, retry, admit);  // first: the port always has an accept pending
    try {
      (*admit)(std::move(socket));
    } catch (const std::exception&) {  // out of memory: this connection is dropped
    }
  });
}
}  // namespace

void accept_each(tcp::acceptor& acceptor, asio::steady_timer& retry,
                 std::function<void(tcp::socket)> admit) {
  accept_next(acceptor, retry,
              std::make_shared<std::function<void(tcp::socket)>>(std::move(admit)));
}

std::thread run_io_thread(asio::io_context& io) {
  return std::thread([&io] {
    for (;;) {
      try {
        io.run();
        return;
      } catch (const std::exception&) {
      }
    }
  });
}

}  // namespace cgp::transport::detail
