// What the coordinator's two HTTP servers (metrics_http_server, console_http) do with Asio in
// the same way: listen on an address, accept without end (surviving a lack of descriptors), run
// their one io thread, and pick the connection that makes room at their cap.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "cgp/common/expected.hpp"

namespace cgp::transport::detail {

// Binds and listens on `host`:`port` (a name or address; port 0: any free one). Errors name
// `parameter`: the host unresolved, or the port in use.
Status listen_on(boost::asio::ip::tcp::acceptor& acceptor, const std::string& host, int port,
                 std::string_view parameter);

// Accepts for as long as the acceptor is open: each connection goes to `admit` (an exception out
// of it drops that connection only); an accept error (out of descriptors) is retried 50 ms
// later, not in a loop. Call on, or before starting, the acceptor's io thread.
void accept_each(boost::asio::ip::tcp::acceptor& acceptor, boost::asio::steady_timer& retry,
                 std::function<void(boost::asio::ip::tcp::socket)> admit);

// The io thread: runs `io` until it is stopped; a handler that throws (out of memory while
// composing an answer) drops its connection, not the server.
std::thread run_io_thread(boost::asio::io_context& io);

// The connection that has waited longest (its `waiting_since` set and the earliest), or null
// when none waits: at a server's cap it is closed to make room.
template <class Connections>
auto longest_waiting(const Connections& connections) -> typename Connections::value_type {
  typename Connections::value_type oldest = nullptr;
  for (auto* c : connections)
    if (c->waiting_since && (!oldest || *c->waiting_since < *oldest->waiting_since)) oldest = c;
  return oldest;
}

}  // namespace cgp::transport::detail
