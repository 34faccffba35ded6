// The lean device transport's server (docs/protocol.md §2b): a port of its own, admitted by a
// ConnectionAdmission like the gRPC device port (caps per address and in all, descriptor
// budget), and a fixed set of epoll threads that drive every connection's TLS and frames — no
// thread, timer or gRPC call per device. Devices on it join the same gateway (registry, rounds,
// watches) as devices on gRPC.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "cgp/common/expected.hpp"
#include "cgp/protocol/frames_tls.hpp"
#include "connection_admission.hpp"

namespace cgp::transport::detail {

class GatewayCore;
class FrameLoop;

class FrameListener {
 public:
  // Binds `address`; `loops` epoll threads (1..64); TLS from the PEM chain and key; its
  // connections counted in `ledger` (the gRPC device port's: the caps hold for both ports).
  static Expected<std::unique_ptr<FrameListener>> start(
      GatewayCore& core, const std::string& address, std::size_t loops,
      const std::string& certificate_chain, const std::string& private_key,
      const ConnectionLimits& limits, std::shared_ptr<ConnectionLedger> ledger);
  ~FrameListener();
  FrameListener(const FrameListener&) = delete;
  FrameListener& operator=(const FrameListener&) = delete;

  // Starts accepting (start() only binds): once the gateway can take devices.
  void start_accepting();
  // Accepts nothing more (the connections stay until stop()).
  void stop_accepting();
  // Every connection not ended yet is ended; waits up to `grace` for devices to close, then
  // closes the rest and joins the loops.
  void stop(std::chrono::milliseconds grace);

  int port() const noexcept;

 private:
  FrameListener() = default;
  protocol::SslContext context_;
  std::unique_ptr<ConnectionAdmission> admission_;
  std::vector<std::unique_ptr<FrameLoop>> loops_;
  std::size_t next_loop_ = 0;  // the accepting thread's only
};

}  // namespace cgp::transport::detail
