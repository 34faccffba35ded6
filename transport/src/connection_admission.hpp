// The gateway's listening socket, owned here instead of by gRPC, so that a flood of connections
// cannot stall it.
//
// Debian's gRPC (1.51) accepts on its own socket without any cap and, when accept4 fails with
// EMFILE, closes its listener for good: after a descriptor flood the coordinator accepts nothing
// until restarted. Here one thread accepts, refuses what is over a cap (total, per peer address,
// the process's descriptor budget) by closing it at once, survives EMFILE (a spare descriptor is
// released to accept and drop the connection), and hands each admitted connection to gRPC
// (ExternalConnectionAcceptor, TLS included), which owns it from then on.
//
// gRPC does not report when it closes a connection, so an admitted connection is remembered by
// (descriptor, socket inode) and counted as closed once that descriptor no longer refers to the
// same socket: checked (fstat) whenever a cap is reached and every second.
#pragma once

#include <grpcpp/server_builder.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "cgp/common/expected.hpp"
#include "cgp/transport/gateway.hpp"

namespace cgp::transport::detail {

// The connections admitted by one or more listeners (connection_admission.cpp).
struct ConnectionLedger;

// Why a connection was closed at accept.
enum class ConnectionRefusal { total_cap, address_cap, descriptors };

class ConnectionAdmission {
 public:
  using Log = std::function<void(const std::string&)>;
  using OnRefused = std::function<void(ConnectionRefusal)>;

  // Binds and listens on "HOST:PORT" or "[IPv6]:PORT" (port 0: any free port). A port in use is
  // a named error (no SO_REUSEPORT: a second coordinator must not share the traffic).
  // `shared`: the ledger of another listener of the same server (ledger()), whose caps and
  // descriptor budget this one then shares: they hold for both ports together.
  static Expected<std::unique_ptr<ConnectionAdmission>> listen(
      const std::string& address, const ConnectionLimits& limits, Log log, OnRefused on_refused,
      std::shared_ptr<ConnectionLedger> shared = nullptr);
  ~ConnectionAdmission();
  ConnectionAdmission(const ConnectionAdmission&) = delete;
  ConnectionAdmission& operator=(const ConnectionAdmission&) = delete;

  // Starts accepting; admitted connections go to `sink` (made by the gRPC server builder).
  void start(std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> sink);
  // The same for a server of our own (the device frames listener): each admitted connection's
  // descriptor (the receiver's from then on) and its peer address, on the accepting thread.
  using HandOver = std::function<void(int fd, const std::string& address)>;
  void start(HandOver hand_over);
  // Stops accepting and closes the listening socket; connections already handed over stay.
  void stop();

  int port() const noexcept;
  // The total cap in force: ConnectionLimits::max_connections, lowered to the descriptor budget.
  std::size_t max_connections() const noexcept;
  // Open connections in the ledger: of every listener sharing it.
  std::size_t open_connections() const;
  std::shared_ptr<ConnectionLedger> ledger() const;

  struct State;

 private:
  explicit ConnectionAdmission(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// "ipv4:1.2.3.4:5678" / "ipv6:[::1]:5678" (gRPC's peer string) -> "1.2.3.4" / "::1".
std::string peer_address(const std::string& peer);

// Parses "HOST:PORT" / "[IPv6]:PORT" with a port of 0..65535, or says which part is wrong.
struct ListenAddress {
  std::string host;
  int port = 0;
};
Expected<ListenAddress> parse_listen_address(const std::string& address);

}  // namespace cgp::transport::detail
